package engine

import (
	"errors"
	"fmt"

	"github.com/idemguard/idemguard/sanitize"
)

// Errors returned by WithIdempotency and Lookup. They are the only errors the
// guard returns: an operation's own failure is a Result, not an error.
var (
	// ErrInvalidInput wraps every validation failure of a Call: tenant,
	// scope, client key, inputs or settings. Nothing was stored.
	ErrInvalidInput = errors.New("idemguard: invalid input")
	// ErrFingerprintMismatch means the client key was used before with
	// different inputs. Nothing was run or stored.
	ErrFingerprintMismatch = errors.New("idemguard: idempotency key reused with different inputs")
	// ErrStoreUnavailable means the store could not answer. The operation
	// was not started (fail closed); if it had already run, see Result.Err.
	ErrStoreUnavailable = errors.New("idemguard: store unavailable")
	// ErrOwnershipLost is the cause set on an operation's context when its
	// claim was taken over by another caller or could not be renewed.
	ErrOwnershipLost = errors.New("idemguard: claim ownership lost")
	// ErrShuttingDown is the cause set on an operation's context when the
	// Guard is closed before the operation finished.
	ErrShuttingDown = errors.New("idemguard: guard shutting down")
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

// OpError lets an operation say why it failed; the reason is stored and
// replayed. Any other error is stored as provider_error (timeout when the
// operation's deadline passed).
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

// PanicError is the error recorded for an operation that panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("operation panicked: %T", e.Value) }
