package engine

import (
	"fmt"

	"github.com/idemguard/idemguard/internal/guarderr"
	"github.com/idemguard/idemguard/sanitize"
)

// Errors returned by WithIdempotency and Lookup. They are the only errors the
// guard returns: an operation's own failure is a Result, not an error.
var (
	// ErrInvalidInput wraps every validation failure of a Call: tenant,
	// scope, client key, inputs or settings. Nothing was stored.
	ErrInvalidInput = guarderr.InvalidInput
	// ErrFingerprintMismatch means the client key was used before with
	// different inputs. Nothing was run or stored.
	ErrFingerprintMismatch = guarderr.FingerprintMismatch
	// ErrStoreUnavailable means the store could not answer. The operation
	// was not started (fail closed); if it had already run, see Result.Err.
	ErrStoreUnavailable = guarderr.StoreUnavailable
	// ErrOwnershipLost is the cause set on an operation's context when its
	// claim was taken over by another caller or could not be renewed.
	ErrOwnershipLost = guarderr.OwnershipLost
	// ErrShuttingDown is the cause set on an operation's context when the
	// Guard is closed before the operation finished.
	ErrShuttingDown = guarderr.ShuttingDown
	// ErrInvalidResult means the operation returned a value that is not a
	// JSON object (a string, a number, an array): a programming error, never
	// an upstream failure. The row is stored failed with stopReason unknown,
	// so a corrected deploy may run the key again.
	ErrInvalidResult = guarderr.InvalidResult
)

// StoreError wraps a store failure with the protocol step it happened in.
// errors.Is(err, ErrStoreUnavailable) holds for every StoreError.
type StoreError struct {
	Op  string
	Err error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("idemguard: store unavailable during %s: %v", e.Op, e.Err)
}

func (e *StoreError) Unwrap() []error { return []error{ErrStoreUnavailable, e.Err} }

// StopReasoner is implemented by an operation error that says why the
// operation failed; the guard finds it with errors.As, so the root package's
// OpError (and any wrapper of it) works without conversion. Any other error
// is stored as provider_error (timeout when the operation's deadline passed).
type StopReasoner interface {
	StopReason() sanitize.StopReason
}

// OpError lets an operation say why it failed; the reason is stored and
// replayed. It is a StopReasoner.
type OpError struct {
	Reason sanitize.StopReason
	Err    error
}

func (e *OpError) Error() string {
	if e.Err == nil {
		return string(e.Reason)
	}
	return fmt.Sprintf("%s: %v", e.Reason, e.Err)
}

func (e *OpError) Unwrap() error { return e.Err }

// StopReason returns e.Reason.
func (e *OpError) StopReason() sanitize.StopReason { return e.Reason }

// PanicError is the error recorded for an operation that panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("operation panicked: %T", e.Value) }
