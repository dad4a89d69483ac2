package idemguard

import (
	"time"

	"github.com/idemguard/idemguard/sanitize"
)

// EventKind names a protocol event.
type EventKind string

// The events a Guard reports through Config.Observe.
const (
	EventClaimed    EventKind = "claimed"     // a fresh (or expired) key was claimed
	EventReplayed   EventKind = "replayed"    // a stored success was answered; FromMemory when the replay cache answered
	EventInProgress EventKind = "in_progress" // a duplicate found the operation running
	EventWaited     EventKind = "waited"      // a call waited for a running duplicate; Duration is the total wait
	EventTakeover   EventKind = "takeover"    // a stale claim was taken over
	EventRetried    EventKind = "retried"     // a failed key was claimed for another attempt
	EventAbandoned  EventKind = "abandoned"   // a stale claim was stored failed (StopReason says why)
	EventRetryLimit EventKind = "retry_limit" // a failed key has no attempts left
	EventLostClaim  EventKind = "lost_claim"  // an operation finished after losing its claim
	EventMismatch   EventKind = "mismatch"    // a client key was reused with other inputs
	EventOperation  EventKind = "operation"   // an operation finished; Duration, Failed, StopReason
	EventStoreError EventKind = "store_error" // a store call failed; StoreOp names it
	// EventDroppedField: the allowlist dropped a field of an operation's
	// result; Field names it (never its value), "(other)" past 1000 names.
	// The guard also logs each (scope, field) once.
	EventDroppedField EventKind = "dropped_field"
	// EventStreamDropped: a streamed answer's events were over
	// Config.MaxStreamBytes and were not stored (its envelope was).
	EventStreamDropped EventKind = "stream_dropped"
	// EventAuditDropped: a batched audit event (replay, in_progress,
	// conflict) was not written to the store: its queue was full, or the
	// store refused the batch. Field says which ("queue_full", "store").
	EventAuditDropped EventKind = "audit_dropped"
)

// Event is one protocol event (for metrics). Observe is called synchronously
// on the caller's goroutine: keep it fast.
type Event struct {
	Kind EventKind
	// Tenant is set on EventReplayed and EventOperation: what a tenant's
	// calls cost and what the guard saved it.
	Tenant     string
	Scope      string
	Duration   time.Duration
	StopReason sanitize.StopReason
	Failed     bool
	StoreOp    string
	FromMemory bool
	Field      string
	// Usage is the model usage of the answer: on EventOperation, what the
	// execution used; on EventReplayed, what the replay did not spend again.
	Usage Usage
}
