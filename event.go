package idemguard

import (
	"time"

	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// Events
//
// Event is the one event type of a Guard: what metrics count, what the
// audit trail records and what a Watch reports all arrive as an Event,
// told apart by its Kind. The rule for where each kind goes:
//
//   - Config.Observe is the one subscription to a Guard: it receives every
//     protocol step (EventClaimed … EventAuditDropped, for metrics and cost
//     figures; and, with Tenant and Scope, kind "reset" for each Guard.Reset
//     and "forced" for each forced run of Call.ForceNew) and, when
//     Config.Audit.Observe is set, every decision of the audit trail
//     (EventAudit, with the trail's record in Event.Audit).
//   - Watcher.Next yields the transitions of one key (EventStarted …
//     EventCanceled), derived from the key's row, so that every process
//     reports the same events with the same IDs.
//
// The pieces of a streamed answer (Chunk) are not events: they are the
// answer itself, stored and replayed byte for byte, while an event says
// what happened to a key. store.AuditEvent is the audit trail's persisted
// row, as the store writes it and Guard.History reads it back.
//
// Observe is called synchronously on the deciding call's goroutine: keep it
// fast (hand what must do I/O to a queue). A panic in it is recovered and
// logged once per kind, and the call goes on.
type Event struct {
	Kind EventKind
	// Tenant is set on EventReplayed, EventOperation, EventDroppedField and
	// EventAudit: what a tenant's calls cost, what the guard saved it, and
	// whose answers lost fields.
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
	// Audit is, on EventAudit, the audit trail's record of the decision.
	Audit *store.AuditEvent

	// ID is, on a Watch event, "<attempt>.<kind>.<unix-micros>": the same
	// transition has the same ID whichever process reports it, and Watch
	// resumes after it.
	ID EventID
	// Attempt is, on a Watch event, the execution it is about.
	Attempt int
	// At is, on a Watch event, when the transition happened, on the store's
	// clock (for stale: when the owner's lease ran out).
	At time.Time
	// Info is, on a Watch event, the key's record as read with the event.
	Info *KeyInfo
}

// EventKind names an Event.
type EventKind string

// The kinds of Event. Config.Observe receives the protocol steps and
// EventAudit; Watcher.Next yields the key transitions.
const (
	// Protocol steps (Config.Observe).
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
	// result; Field names it (never its value), "(other)" past 100 names of
	// one tenant. The name comes from the answer's content: never make it a
	// metric label. The guard also logs each (tenant, scope, field) once.
	EventDroppedField EventKind = "dropped_field"
	// EventStreamDropped: a streamed answer's chunks were over
	// Config.MaxStreamBytes and were not stored (its envelope was).
	EventStreamDropped EventKind = "stream_dropped"
	// EventAuditDropped: a batched audit record (replay, in_progress,
	// conflict) was not written to the store: its queue was full, or the
	// store refused the batch. Field says which ("queue_full", "store").
	EventAuditDropped EventKind = "audit_dropped"

	// EventAudit: an idempotency decision of the audit trail (Config.Audit
	// with Observe set); Audit holds its record. A durable decision is
	// observed once the change it records is stored.
	EventAudit EventKind = "audit"

	// Key transitions (Watcher.Next).

	// EventStarted: an execution (Attempt) holds the key.
	EventStarted EventKind = "started"
	// EventAlive: the running execution renewed its lease (a heartbeat).
	EventAlive EventKind = "alive"
	// EventProgress: the running execution reported how far it got
	// (package progress) and a heartbeat stored it: Info.Progress holds
	// it (numbers, and a stage from the scope's allowlist); At is the
	// heartbeat that carried it. One per stored change, in order; each
	// attempt counts from zero (a new started event resets it).
	EventProgress EventKind = "progress"
	// EventCancelRequested: a cancel was requested; the owner stops at its
	// next heartbeat.
	EventCancelRequested EventKind = "cancel_requested"
	// EventStale: the owner went silent for longer than its lease (its
	// process died). Resubmitting the same call takes the key over (policy
	// takeover) or marks it abandoned (policy fail); nothing re-runs it by
	// itself.
	EventStale EventKind = "stale"
	// EventSucceeded: the answer is stored (Info.Envelope). Final.
	EventSucceeded EventKind = "succeeded"
	// EventFailed: the execution failed; Info.Envelope says why. Final.
	EventFailed EventKind = "failed"
	// EventCanceled: the execution stopped on request; the same call runs
	// the key again. Final.
	EventCanceled EventKind = "canceled"
)

// Final reports whether a Watch event ends the key's run: its answer is
// stored.
func (e Event) Final() bool { return e.Kind.rank() == rankFinal }
