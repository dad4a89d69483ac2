package idemguard

import (
	"net/http"
	"time"

	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
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
	// Envelope is the sanitized answer (zero for an answer kept as a
	// document, Call.Keep).
	Envelope sanitize.Envelope
	// Body is the answer's exact JSON: byte for byte what the first caller
	// got, except that an envelope's "cached" is true on a replay.
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
	// KeyHash names the key (with the tenant and scope); Guard.KeyOfHash
	// makes the Key that Lookup, Watch, Cancel and History take from it.
	KeyHash string
	// Err is the operation's own error when it ran in this call and failed
	// (an *OpError, a *PanicError, ...). It is never stored.
	Err error
	// Forced is true on the answer of a forced run (Call.ForceNew) that
	// replaced a stored answer; Replaced is the attempt whose answer it
	// replaced. Replays of the new answer carry neither.
	Forced   bool
	Replaced int
	// LostClaim is true when this call ran the operation but its claim had
	// been taken over meanwhile, so its answer was not stored.
	LostClaim bool
	// Header holds the response headers stored with the answer
	// (Response.Header).
	Header http.Header
	// DroppedFields names the fields removed from the operation's value
	// before it was stored (names only, never values), at most 64.
	DroppedFields []string
	// Usage is what the execution that made the answer spent
	// (Response.Usage); a replay did not spend it again.
	Usage Usage
	// Accepted is true when Start won the claim and the operation now runs
	// in the background (Status is StatusInProgress).
	Accepted bool
}

// KeyInfo is what Lookup tells about a key. Times are the store's clock.
type KeyInfo struct {
	KeyHash     string
	Status      store.RowStatus
	Attempts    int
	CreatedAt   time.Time
	StartedAt   time.Time
	HeartbeatAt time.Time
	CompletedAt time.Time
	ExpiresAt   time.Time
	// Envelope (or, for an answer kept as a document with Call.Keep,
	// Document) and StatusCode are set once the key is completed.
	Envelope   *sanitize.Envelope
	Document   []byte
	StatusCode int
	// Header holds the headers stored with the answer.
	Header http.Header
	// DroppedFields names the fields removed from the stored answer (names
	// only, never values), so the loss is visible to whoever looks.
	DroppedFields []string
	// Stale is true for a started key whose owner went silent for longer
	// than its lease: resubmitting the same call takes it over (policy
	// takeover) or marks it abandoned (policy fail). Nothing re-runs it by
	// itself: the guard never stores the inputs.
	Stale bool
	// CancelRequested is true for a started key whose cancel was requested
	// (Guard.Cancel) and that has not stopped yet.
	CancelRequested bool
	// SecretID names the secret the key's hash was made with ("" for the
	// unnamed secret): the id, never the secret.
	SecretID string
	// Progress is what the key's current attempt last reported of how far
	// it got (package progress), as its heartbeat stored it; a completed
	// key keeps its last one. nil when the attempt reported nothing: a new
	// attempt (a retry, a takeover) starts again from none.
	Progress *store.Progress
	// StreamEvents is "stored" for a key completed by a stream whose event
	// sequence is stored, "dropped" when it was over Config.MaxStreamBytes
	// (only the envelope was stored), "" otherwise.
	StreamEvents string
}
