package idemguard

import (
	"time"

	"github.com/idemguard/idemguard/sanitize"
)

// Status is the outcome of Do.
type Status string

const (
	// StatusSucceeded: the operation succeeded, now or before (Result.Cached).
	StatusSucceeded Status = "succeeded"
	// StatusInProgress: another caller is running the operation now.
	StatusInProgress Status = "in_progress"
	// StatusFailed: the operation failed, now or before; see Result.StopReason.
	StatusFailed Status = "failed"
)

// Result is what Do answers. Body and Envelope must not be
// modified: replays may share them.
type Result struct {
	Status Status
	// Envelope is the sanitized answer.
	Envelope sanitize.Envelope
	// Body is the Envelope's exact JSON: byte for byte what the first caller
	// got, except that "cached" is true on a replay.
	Body []byte
	// StatusCode is the HTTP status stored with the answer (Response), 200 by
	// default; 502 for an operation failure, 422 when the upstream rejected
	// the inputs (stopReason invalid_input), 409 for in progress, 500 for
	// ErrInvalidResult.
	StatusCode int
	// Cached is true when the answer was stored by an earlier call.
	Cached bool
	// StopReason is Envelope.StopReason.
	StopReason sanitize.StopReason
	// Attempt is the execution this answer came from (1 for the first).
	Attempt int
	// FirstSeen is when the key was first claimed (store clock); for a fresh
	// execution, the local time of the claim.
	FirstSeen time.Time
	// CompletedAt is when the stored answer was written (zero if not stored).
	CompletedAt time.Time
	// KeyHash names the key (with the tenant and scope); Guard.LookupHash
	// takes it.
	KeyHash string
	// Err is the operation's own error when it ran in this call and failed
	// (an *OpError, a *PanicError, ...). It is never stored.
	Err error
	// LostClaim is true when this call ran the operation but its claim had
	// been taken over meanwhile, so its answer was not stored.
	LostClaim bool
}

// KeyStatus is the state of a stored key.
type KeyStatus string

const (
	// KeyStarted: an execution holds the key (or held it and went silent).
	KeyStarted KeyStatus = "started"
	// KeySucceeded: the answer is stored and replayed.
	KeySucceeded KeyStatus = "succeeded"
	// KeyFailed: the last execution failed.
	KeyFailed KeyStatus = "failed"
)

// KeyInfo is what Lookup tells about a key. Times are the store's clock.
type KeyInfo struct {
	KeyHash     string
	Status      KeyStatus
	Attempts    int
	CreatedAt   time.Time
	StartedAt   time.Time
	HeartbeatAt time.Time
	CompletedAt time.Time
	ExpiresAt   time.Time
	// Envelope and StatusCode are set once the key is completed.
	Envelope   *sanitize.Envelope
	StatusCode int
	// StreamEvents is "stored" for a key completed by a stream whose event
	// sequence is stored, "dropped" when it was over Config.MaxStreamBytes
	// (only the envelope was stored), "" otherwise.
	StreamEvents string
}
