package idemguard

import (
	"errors"
	"fmt"

	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// The errors Do and Lookup return, and the causes an operation's
// context may carry. Compare with errors.Is (or, for a context's cause, ==).
// An operation's own failure is not among them: it is a Result with
// Status [StatusFailed].
var (
	// ErrInvalidInput wraps every validation failure of a Call: tenant,
	// scope, client key, inputs or settings. Nothing was run or stored.
	ErrInvalidInput = errors.New("idemguard: invalid input")
	// ErrFingerprintMismatch means the client key was used before with
	// different inputs. Nothing was run or stored (HTTP 422).
	ErrFingerprintMismatch = errors.New("idemguard: idempotency key reused with different inputs")
	// ErrStoreUnavailable means the store could not answer: every
	// *[StoreError] matches it. The operation was not started (fail closed).
	ErrStoreUnavailable = errors.New("idemguard: store unavailable")
	// ErrNotFound is returned by Lookup for a key that is absent, expired or
	// another tenant's; it is the value of store.ErrNotFound.
	ErrNotFound = store.ErrNotFound
	// ErrInvalidResult means the operation ran but returned a value that is
	// not a JSON object (a string, a number, an array), or a Response whose
	// status code is outside 100–599: a programming error, never an upstream
	// failure. An operation may also return an error wrapping it to report a
	// result it cannot produce (the routers middleware does, for a handler
	// that streams or writes something other than JSON). The key is stored failed with stopReason
	// unknown and HTTP status 500, so a corrected deploy may run it again
	// (while attempts remain). Do returns it together with the
	// Result of that failure.
	ErrInvalidResult = errors.New("idemguard: operation returned an invalid result")
	// ErrOwnershipLost is the cause (context.Cause) of an operation's context
	// cancelled because another caller took its claim over, or the claim
	// could not be renewed.
	ErrOwnershipLost = errors.New("idemguard: claim ownership lost")
	// ErrShuttingDown is the cause of an operation's context cancelled by
	// [Guard.Close]; calls made after Close return a *[StoreError] wrapping it.
	ErrShuttingDown = errors.New("idemguard: guard shutting down")
	// ErrCanceled is the cause (context.Cause) of an operation's context
	// cancelled because a caller asked for it (Guard.Cancel). The key is then
	// stored failed with stopReason canceled, without counting the attempt, and
	// the same call runs it again.
	ErrCanceled = errors.New("idemguard: operation canceled on request")
	// ErrKeyFinished is returned by Guard.Cancel for a key that is not running:
	// its answer is stored (succeeded or failed), so there is nothing to cancel.
	ErrKeyFinished = errors.New("idemguard: the key has finished; there is nothing to cancel")
	// ErrTooManyWaiters is returned by Do and DoStream when a call would wait for
	// a running duplicate but Config.MaxWaiters calls of this process already
	// wait for that key (or 1000 for its tenant). The call is
	// refused at once, never queued; it may retry later.
	ErrTooManyWaiters = errors.New("idemguard: too many callers wait for this key")
	// ErrTooManyLiveStreams is returned by DoStream when it would run the
	// operation but Config.MaxLiveStreams streams already run in this
	// process. Nothing was claimed or run; the call may retry later, or on
	// another process.
	ErrTooManyLiveStreams = errors.New("idemguard: too many live streams in this process")
	// ErrTooManyWatchers is returned by Guard.Watch when the key, or its
	// tenant, already has as many watchers in this process as
	// Config.MaxWatchersPerKey (MaxWatchersPerTenant) allow.
	ErrTooManyWatchers = errors.New("idemguard: too many watchers of this key or tenant")
)

// StoreError is a store failure, with the protocol step it happened in
// ("claim", "read", "commit", ...). errors.Is(err, ErrStoreUnavailable)
// holds for every StoreError.
type StoreError struct {
	Op  string
	Err error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("idemguard: store unavailable during %s: %v", e.Op, e.Err)
}

// Unwrap returns ErrStoreUnavailable and the store's own error.
func (e *StoreError) Unwrap() []error { return []error{ErrStoreUnavailable, e.Err} }

// OpError lets an operation say why it failed: return
// &OpError{Reason: sanitize.RateLimited, Err: err}. The reason is stored and
// replayed; the key may run again while attempts remain, except for the final
// reasons (abandoned, retry_limit). Any other error is stored as
// provider_error, or timeout when the operation's deadline passed. OpError
// may be wrapped: the guard finds it with errors.As. Reason canceled is kept
// only when a cancel was recorded (Guard.Cancel; the context's cause is
// ErrCanceled), since a cancelled attempt is not counted; an operation that
// reports it otherwise (its own HTTP client was cancelled) is classified as
// if it had returned Err.
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

// Unwrap returns e.Err.
func (e *OpError) Unwrap() error { return e.Err }

// StopReason returns e.Reason. The guard recognises any error in the chain
// that has this method (see stopReasoner).
func (e *OpError) StopReason() sanitize.StopReason { return e.Reason }

// PanicError is Result.Err of an operation that panicked. The panic is
// recovered, the key stored failed with stopReason unknown, and only the
// value's type and the stack are logged.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("operation panicked: %T", e.Value) }

// stopReasoner is what the guard looks for, with errors.As, in an
// operation's error: an error that says why the operation failed. OpError is
// one; an application's own error type may be another. Any other error is
// stored as provider_error (timeout when the operation's deadline passed).
type stopReasoner interface {
	StopReason() sanitize.StopReason
}
