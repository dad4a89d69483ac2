// Package store is the seam between the guard (package idemguard) and the
// database that holds its idempotency records: the Store interface, the row
// it reads (Record), one parameter type per guarded write, the sentinel
// errors every implementation returns, and the audit-trail row.
//
// Two stores ship with the module: the MySQL store (package
// github.com/idemguard/idemguard/mysql) and the in-memory store (package
// github.com/idemguard/idemguard/store/memstore). A store written in another
// module proves itself against the same conformance suite,
// github.com/idemguard/idemguard/store/storetest.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/idemguard/idemguard/sanitize"
)

// RowStatus is the state of a stored key: the status column of
// idempotency_keys, and what idemguard.KeyInfo reports.
type RowStatus string

// The row states (see the package documentation for the transitions).
const (
	RowStarted   RowStatus = "started"
	RowSucceeded RowStatus = "succeeded"
	RowFailed    RowStatus = "failed"
)

// Store errors. A Store returns exactly these sentinels for the protocol
// outcomes named on its methods; any other error means the store could not
// answer and is reported to the guard's callers as
// idemguard.ErrStoreUnavailable.
var (
	// ErrNotFound is returned by Store.Get when no row matches. The guard
	// returns the same value (idemguard.ErrNotFound) for a key that is
	// absent, expired or another tenant's.
	ErrNotFound = errors.New("idemguard: key not found")
	// ErrDuplicate is returned by Store.Claim when a row with the same
	// (tenant, scope, key_hash) exists.
	ErrDuplicate = errors.New("idemguard: row already exists")
	// ErrKeyRunning is returned by Guard.Reset for a key whose operation
	// is running: cancel it first (Guard.Cancel). One execution in flight
	// stays the rule.
	ErrKeyRunning = errors.New("idemguard: the key is running; cancel it first")
	// ErrResetForbidden is returned by Guard.Reset, and by a call with
	// Call.ForceNew, when the scope's settings do not allow a key to run
	// again on request (Settings.AllowReset). Nothing changed.
	ErrResetForbidden = errors.New("idemguard: the scope does not allow resets or forced runs")
	// ErrOutcomeUnknown marks a write whose effect the store cannot report:
	// the statement may or may not have applied (MySQL error 1213, a
	// deadlock victim or a multi-primary certification failure; 1205, a lock
	// wait timeout). A Store wraps the driver's error with it. The guard
	// treats it like any other store error on a write: it decides by
	// re-reading the row, never by the error.
	ErrOutcomeUnknown = errors.New("idemguard: outcome of the write unknown")
	// ErrNotSent marks a call the store can prove never reached the
	// database: no connection could be had (a refused or failed dial, a
	// failed handshake, a database known to be down), or the driver failed
	// before writing a byte of the statement. A Store wraps its error with
	// it. The outcome is known, nothing was written, so the guard answers
	// idemguard.ErrStoreUnavailable at once instead of re-reading the row.
	// Return it only with proof: a statement that may have been sent (a
	// timeout, a connection lost after the write) is an unknown outcome. An
	// error wrapping both ErrNotSent and ErrOutcomeUnknown counts as unknown.
	ErrNotSent = errors.New("idemguard: nothing was sent to the store")
)

// Record is one row of idempotency_keys, as read by Store.Get.
type Record struct {
	ID          uint64
	Tenant      string
	Scope       string
	KeyHash     string
	Fingerprint string
	Status      RowStatus
	Attempts    int
	ClaimNonce  string
	// Response is the stored sanitized envelope (response_json); nil while started.
	Response []byte
	// ResponseCode is the HTTP status to replay; 0 when NULL.
	ResponseCode int
	CreatedAt    time.Time
	StartedAt    time.Time
	HeartbeatAt  time.Time // zero when NULL
	CompletedAt  time.Time // zero when NULL
	ExpiresAt    time.Time
	// Lease is the StaleAfter the owner of a started row promised when it
	// claimed it (lease_micros); 0 when the row does not say (rows written
	// before the column existed). See Record.Stale.
	Lease time.Duration
	// CancelRequestedAt is when a cancel of the running execution was
	// requested (Store.RequestCancel); zero when none was.
	CancelRequestedAt time.Time
	// Progress is what the current attempt last reported of how far it got,
	// written by Store.Renew; zero (At zero) when it reported nothing.
	Progress Progress
	// Now is the store's clock when the row was read. Every expiry and
	// staleness judgement compares the row's times with Now, never with the
	// application server's clock.
	Now time.Time
	// SecretID names the secret whose HMAC made KeyHash and Fingerprint
	// (secret_id); "" for the unnamed secret (NULL).
	SecretID string
	// Events is the stored event sequence of a streamed success
	// (response_events): nil for a call that did not stream, empty but not
	// nil for a stream stored without its events (over the size limit).
	Events []byte
}

// The staleness rule, defined here once: the guard, both stores of the
// module and the MySQL cleanup apply it, the MySQL store's SQL is written
// from it, and the conformance case Store/StalenessRuleIsOneDefinition
// (package storetest) holds every store, and its cleanup, to it. Every time
// is compared with the store's clock at the read (Record.Now; the
// database's UTC_TIMESTAMP(6) in SQL), never the application server's. For
// a reader whose StaleAfter is fallback:
//
//	lease       = Lease if Lease > 0, else fallback
//	lastBeat    = HeartbeatAt, or StartedAt if HeartbeatAt is zero (NULL)
//	expired     = ExpiresAt < now
//	stale       = Status = started AND lastBeat < now - lease
//	reclaimable = expired AND (Status != started OR stale)
//
// The lease is the owner's promise: a row's own lease decides whenever it
// has one, so a reader with another StaleAfter (a rolling configuration
// change) judges the owner by what the owner promised; fallback counts only
// for a row without one. A stale row may be taken over (ReclaimStale) or
// abandoned; a reclaimable row counts as absent: the guard claims it afresh
// (ReclaimExpired) and cleanup deletes it. A started row that is not stale
// is live, expired or not: neither a claim nor cleanup displaces it.

// Expired reports whether the row's expires_at has passed at r.Now (see the
// staleness rule above).
func (r Record) Expired() bool { return r.ExpiresAt.Before(r.Now) }

// Stale reports whether r is a started row whose owner went silent for
// longer than its lease at r.Now (see the staleness rule above); fallback
// is the lease of a row that carries none.
func (r Record) Stale(fallback time.Duration) bool {
	return r.Status == RowStarted && r.LastBeat().Before(r.Now.Add(-r.LeaseOr(fallback)))
}

// Reclaimable reports whether the row may be claimed afresh, as if it were
// absent, and deleted by cleanup: it expired at r.Now, and it is not a
// started row whose owner is still within its lease (see the staleness rule
// above). fallback is the lease of a row that carries none.
func (r Record) Reclaimable(fallback time.Duration) bool {
	return r.Expired() && (r.Status != RowStarted || r.Stale(fallback))
}

// LeaseOr is r.Lease, or fallback when the row carries none (Lease <= 0).
func (r Record) LeaseOr(fallback time.Duration) time.Duration {
	if r.Lease > 0 {
		return r.Lease
	}
	return fallback
}

// LastBeat is the owner's last sign of life: heartbeat_at, or started_at
// when heartbeat_at is NULL.
func (r Record) LastBeat() time.Time {
	if r.HeartbeatAt.IsZero() {
		return r.StartedAt
	}
	return r.HeartbeatAt
}

// ClaimParams are the arguments of Store.Claim.
type ClaimParams struct {
	Tenant, Scope, KeyHash, Fingerprint string
	Nonce                               string
	TTL                                 time.Duration
	// Lease is the owner's StaleAfter, stored as the row's lease.
	Lease time.Duration
	// SecretID names the secret of KeyHash and Fingerprint; "" (stored as
	// NULL) for the unnamed secret.
	SecretID string
	// Audit, when set, is the claim's event (kind AuditClaimed), stored on
	// the row itself: its ID and Actor go with the INSERT, so a claim costs
	// the same one statement with the trail as without, and the event is
	// there exactly when the row is. History reads it from the row (At is
	// the row's CreatedAt, the store's clock, and Attempt 1) until something
	// overwrites or deletes the row: an expired re-claim, the release of
	// this claim, or cleanup; each moves the event to the trail in the same
	// transaction as its change.
	Audit *AuditEvent
}

// ReclaimKind says which guarded transition back to started a Reclaim makes.
type ReclaimKind int

const (
	// ReclaimExpired re-claims a row whose expires_at has passed, as if it
	// were absent: attempt count 1, new fingerprint, response cleared, all
	// times reset. Guard: the row is reclaimable by the staleness rule
	// (Record.Reclaimable; a live owner is never displaced by expiry).
	ReclaimExpired ReclaimKind = iota + 1
	// ReclaimStale takes over a started row that is stale by the staleness
	// rule (Record.Stale): attempt count + 1, started_at = heartbeat_at = now.
	ReclaimStale
	// ReclaimFailed retries a failed row while attempt_count < MaxAttempts:
	// status started, attempt count + 1, response cleared.
	ReclaimFailed
	// ReclaimForced runs a finished row again on request (a forced run):
	// guarded by status succeeded or failed and not expired, whatever the
	// attempts, it makes the row started with attempt count + 1, the
	// response cleared and expires_at at least now + TTL, like ReclaimFailed.
	ReclaimForced
)

func (k ReclaimKind) String() string {
	switch k {
	case ReclaimExpired:
		return "expired"
	case ReclaimStale:
		return "stale"
	case ReclaimFailed:
		return "failed"
	case ReclaimForced:
		return "forced"
	}
	return "unknown"
}

// ReclaimParams are the arguments of Store.Reclaim. The UPDATE is guarded by
// ID, OldNonce and OldAttempts (every transition that changes attempt_count
// also changes the nonce) and by the Kind's own condition, evaluated with the
// store's clock. Staleness is judged by the staleness rule (Record.Stale):
// with the row's stored lease; StaleAfter stands in only for a row that has
// none.
type ReclaimParams struct {
	Kind        ReclaimKind
	ID          uint64
	OldNonce    string
	OldAttempts int
	NewNonce    string
	Fingerprint string        // ReclaimExpired: the new request's fingerprint
	SecretID    string        // ReclaimExpired: the secret id of the new request's fingerprint
	TTL         time.Duration // ReclaimExpired, ReclaimFailed, ReclaimForced: expires_at >= now + TTL
	StaleAfter  time.Duration // ReclaimExpired, ReclaimStale: fallback for a row without a lease
	MaxAttempts int           // ReclaimFailed
	Lease       time.Duration // the new owner's StaleAfter, stored as the row's lease
	Audit       *AuditEvent   // written atomically with a winning update; nothing when it loses
}

// AbandonParams are the arguments of Store.Abandon: a stale started row is
// marked failed with the given response instead of being taken over.
type AbandonParams struct {
	ID           uint64
	OldNonce     string
	OldAttempts  int
	StaleAfter   time.Duration // fallback for a row without a lease
	Response     []byte
	ResponseCode int
	TTL          time.Duration
	Audit        *AuditEvent // written atomically with a winning update
}

// CompleteParams are the arguments of Store.Complete.
type CompleteParams struct {
	ID           uint64
	Nonce        string
	Status       RowStatus // RowSucceeded or RowFailed
	Response     []byte
	ResponseCode int
	TTL          time.Duration // expires_at = now + TTL
	// Canceled gives the attempt back (attempt_count - 1): the execution
	// stopped because a caller asked it to, so the key may run again
	// without counting it.
	Canceled bool
	// Events is the event sequence of a streamed success (nil: none), stored
	// as given; see Record.Events.
	Events []byte
	// Progress, when not nil, is the execution's last progress, written in
	// the same statement (its At is the completed_at written); nil leaves
	// the row's progress as it is. A completed row keeps its last progress.
	Progress *Progress
}

// ReleaseParams are the arguments of Store.Release: the claim ID/Nonce is
// given back because the operation never ran (its caller was told so).
// Prev is the row as it was before the claim's Reclaim changed it; nil
// after a Claim or a ReclaimExpired, whose row counts as absent.
type ReleaseParams struct {
	ID    uint64
	Nonce string
	Prev  *Record
	Audit *AuditEvent // written atomically with a winning release
}

// ResetParams are the arguments of Store.Reset: the finished row the caller
// read (ID, its claim nonce and attempt count) ends its life.
type ResetParams struct {
	ID          uint64
	OldNonce    string
	OldAttempts int
	// NewNonce replaces the claim nonce, so that no guarded write made from
	// a read of the old row can land after the reset.
	NewNonce string
	Audit    *AuditEvent // written atomically with a winning reset
}

// Store keeps the idempotency records. The guard's promises (one execution
// in flight per key, a replaced owner never overwrites the new owner's
// answer) rest on the exact semantics of every method below: which write
// wins a race and what a guarded update reports. An implementation is held
// to them by the conformance suite in package storetest; methods may be
// added before a v1 release.
//
// Implementations are safe for concurrent use, by many goroutines and (for
// shared stores) many processes; every method is a single atomic statement
// (or, when its params carry an Audit event, one transaction that writes
// the row change and the event together, or neither; a claim's event is
// stored on the row it inserts, see ClaimParams.Audit), and the bool results
// report whether exactly one row was changed by a guarded update. Every
// guarded update changes at least one column of the row it matches (a new
// nonce, a new status or a new microsecond timestamp), so "rows changed",
// which is what MySQL reports, equals "rows matched".
//
// Errors: Claim and Get return the sentinels they name (ErrDuplicate,
// ErrNotFound). A guarded write that matches no row returns false and a nil
// error, never ErrNotFound. A write that may or may not have applied (a
// deadlock victim, a lock wait timeout) must return an error wrapping
// ErrOutcomeUnknown. A call that provably never reached the database (no
// connection could be had) returns an error wrapping ErrNotSent: the guard
// answers at once, without re-reading. Any other error means the store could
// not answer; the guard decides every unknown outcome by re-reading the row.
type Store interface {
	// Claim inserts a started row with attempt_count 1, started_at =
	// heartbeat_at = now and expires_at = now + TTL, and returns its id. If a
	// row with the same (tenant, scope, key_hash) exists, Claim must return
	// ErrDuplicate.
	// A write the database reports as possibly applied or not (a deadlock
	// victim, a lock wait timeout) must return an error wrapping
	// ErrOutcomeUnknown.
	Claim(ctx context.Context, p ClaimParams) (id uint64, err error)
	// Get returns the row for (tenant, scope, keyHash) with Record.Now set to
	// the store's clock. If there is none, Get must return ErrNotFound.
	Get(ctx context.Context, tenant, scope, keyHash string) (Record, error)
	// GetMany returns, in one read, the rows for (tenant, scope) whose
	// key_hash is one of keyHashes (the hashes of one request under each
	// configured secret), each with Record.Now set to the store's clock, in
	// no particular order. No such row is an empty result, not an error.
	GetMany(ctx context.Context, tenant, scope string, keyHashes []string) ([]Record, error)
	// Reclaim makes the guarded transition p.Kind and reports whether it
	// changed the row. false means another writer got there first: re-read.
	// A write the database reports as possibly applied or not (a deadlock
	// victim, a lock wait timeout) must return an error wrapping
	// ErrOutcomeUnknown.
	Reclaim(ctx context.Context, p ReclaimParams) (bool, error)
	// Abandon marks a stale started row failed with p.Response; it reports
	// whether it changed the row.
	// A write the database reports as possibly applied or not (a deadlock
	// victim, a lock wait timeout) must return an error wrapping
	// ErrOutcomeUnknown.
	Abandon(ctx context.Context, p AbandonParams) (bool, error)
	// Heartbeat sets heartbeat_at = now on the started row id owned by
	// nonce, and reports whether it still owns it.
	// A write the database reports as possibly applied or not (a deadlock
	// victim, a lock wait timeout) must return an error wrapping
	// ErrOutcomeUnknown.
	Heartbeat(ctx context.Context, id uint64, nonce string) (bool, error)
	// Complete moves the started row id owned by nonce to p.Status with the
	// response, completed_at = now and expires_at = now + TTL, and returns
	// the completed_at it wrote (the store's clock), so that a replay from
	// memory carries the same time as one read from the store. false means
	// the row is no longer ours: nothing was written.
	// A write the database reports as possibly applied or not (a deadlock
	// victim, a lock wait timeout) must return an error wrapping
	// ErrOutcomeUnknown.
	Complete(ctx context.Context, p CompleteParams) (ok bool, completedAt time.Time, err error)
	// Release undoes a claim whose operation never ran: guarded by id,
	// status started and claim_nonce = p.Nonce, it deletes the row when
	// p.Prev is nil and otherwise restores p.Prev's status, nonce, attempt
	// count, response, times and lease, so no attempt is burnt and nothing
	// is marked abandoned. It reports whether it changed the row.
	// A write the database reports as possibly applied or not (a deadlock
	// victim, a lock wait timeout) must return an error wrapping
	// ErrOutcomeUnknown.
	Release(ctx context.Context, p ReleaseParams) (bool, error)
	// Ping reports whether the store can answer.
	Ping(ctx context.Context) error
	// Renew is the heartbeat of a running execution (see RenewParams): it
	// sets heartbeat_at = now and expires_at = at least now + p.Extend on
	// the started row p.ID owned by p.Nonce, with p.Progress (when given,
	// its At = that heartbeat_at) in the same statement, and reports whether it still
	// owns it and whether a cancel was requested.
	// A write the database reports as possibly applied or not (a deadlock
	// victim, a lock wait timeout) must return an error wrapping
	// ErrOutcomeUnknown.
	Renew(ctx context.Context, p RenewParams) (RenewResult, error)
	// RequestCancel records a cancel request (cancel_requested_at = now) on
	// the started row p.ID owned by p.Nonce, and reports whether it changed
	// the row; false means the row is no longer that execution: re-read.
	// A write the database reports as possibly applied or not (a deadlock
	// victim, a lock wait timeout) must return an error wrapping
	// ErrOutcomeUnknown.
	RequestCancel(ctx context.Context, p CancelParams) (bool, error)
	// Reset ends the life of a finished row: guarded by p.ID, p.OldNonce,
	// p.OldAttempts, status succeeded or failed and expires_at not passed,
	// it sets the claim nonce to p.NewNonce and expires_at to the Unix epoch
	// plus a second (not "now": a clock stepped back would bring the row
	// back to life), so the row is absent to every reader (Record.Reclaimable)
	// and the next claim re-claims it as new (ReclaimExpired: attempt 1).
	// It reports whether it changed the row.
	// A write the database reports as possibly applied or not (a deadlock
	// victim, a lock wait timeout) must return an error wrapping
	// ErrOutcomeUnknown.
	Reset(ctx context.Context, p ResetParams) (bool, error)
	// AppendAudit writes events to the audit trail. A durable kind is one
	// event each, skipping any whose ID is already there. The read-only
	// kinds (AuditKind.Tallied: replays, in-progress answers, conflicts)
	// are added to their tally: one per (tenant, scope, key hash, kind,
	// attempt, actor, detail), holding how many there were (Count), the
	// earliest At with its event's ID and OriginalAt, and the latest At
	// (LastAt), so that a retry storm adds counts, never rows. A tallied
	// event may stand for several its caller counted already: Count of
	// them (below 1: one), the earliest at At (with its ID and
	// OriginalAt), the latest at LastAt (zero, or before At: At). A tally
	// has no memory of IDs: a batch written twice counts twice, so a
	// caller writes a batch again only when the first write provably never
	// reached the store (ErrNotSent).
	// A write the database reports as possibly applied or not (a deadlock
	// victim, a lock wait timeout) must return an error wrapping
	// ErrOutcomeUnknown. The store keeps nothing of events once it has
	// returned nil: the caller reuses the slice.
	AppendAudit(ctx context.Context, events []AuditEvent) error
	// History returns the audit events of (tenant, scope) whose KeyHash is
	// one of keyHashes, oldest first (by At, then ID), at most limit: the
	// durable events, the claimed events their rows still carry (see
	// ClaimParams.Audit), and the tallies (each one AuditEvent with Count
	// and LastAt, at its first time).
	History(ctx context.Context, tenant, scope string, keyHashes []string, limit int) ([]AuditEvent, error)
}

// RenewParams are the arguments of Store.Renew.
type RenewParams struct {
	ID    uint64
	Nonce string
	// Extend keeps the row alive while it runs: expires_at becomes at
	// least now + Extend (never earlier than it was), so neither cleanup
	// nor an expired re-claim can touch a running execution, however much
	// longer than its TTL it runs.
	Extend time.Duration
	// Progress, when not nil, is the execution's latest progress, written
	// with the renewal in the same statement (its At is the heartbeat_at
	// the renewal writes); nil leaves the row's progress as it is.
	Progress *Progress
}

// Progress is how far a running execution got, as it reported it: Done of
// Total steps (Total 0: not known) and the stage it is in, a name from its
// scope's allowlist ("" for none). Nothing else of an operation's is ever
// stored with it. Every transition back to started (retry, takeover,
// expired re-claim) clears it: each attempt's progress starts from zero.
type Progress struct {
	Done, Total int64
	Stage       string
	// At is when the row got this progress: the heartbeat_at of the
	// renewal that wrote it (the store's clock); zero for none.
	At time.Time
}

// MaxProgressStage is the longest stage name a store keeps (bytes).
const MaxProgressStage = 48

// RenewResult is what Store.Renew reports.
type RenewResult struct {
	// Renewed is true when the row was still the caller's (started, its
	// nonce) and its heartbeat moved forward.
	Renewed bool
	// CancelRequested is true when the renewed row carries a cancel
	// request.
	CancelRequested bool
}

// CancelParams are the arguments of Store.RequestCancel: the execution the
// caller read (row ID, its claim nonce).
type CancelParams struct {
	ID    uint64
	Nonce string
	Audit *AuditEvent // written atomically with a recorded request
}

// AuditKind names an idempotency decision in the audit trail.
type AuditKind string

// The decisions the audit trail records. All but the read-only three change
// the row and are durable with that change (see AuditConfig.Store); replay,
// in_progress and conflict only read it, are written in batches and stored
// as tallies (Tallied).
const (
	AuditClaimed        AuditKind = "claimed"         // a key absent until now was claimed (attempt 1)
	AuditExpiredReclaim AuditKind = "expired_reclaim" // an expired row was claimed afresh (attempt 1)
	AuditTakeover       AuditKind = "takeover"        // a stale claim was taken over (the next attempt)
	AuditRetried        AuditKind = "retried"         // a stored retryable failure was claimed again
	AuditAbandoned      AuditKind = "abandoned"       // a stale claim was stored failed; StopReason says why
	AuditReleased       AuditKind = "released"        // a claim whose operation never ran was given back
	AuditCanceled       AuditKind = "canceled"        // a cancel of the running execution was recorded
	AuditReplay         AuditKind = "replay"          // a stored answer was replayed; OriginalAt is its completion
	AuditInProgress     AuditKind = "in_progress"     // a duplicate found the key running; Detail says how it was answered
	AuditConflict       AuditKind = "conflict"        // a client key was reused with other inputs (422)
	AuditReset          AuditKind = "reset"           // a finished key's answer was reset; Attempt is the attempt it ended
	AuditForced         AuditKind = "forced"          // a finished key was run again on request; Attempt is the new one
)

// Durable reports whether events of kind k change the row, and so are
// written in the same transaction as the change.
func (k AuditKind) Durable() bool { return !k.Tallied() }

// Tallied reports whether events of kind k only read the row, and so are
// stored as counts per key, kind, attempt, actor and detail (see
// Store.AppendAudit) rather than one each.
func (k AuditKind) Tallied() bool {
	switch k {
	case AuditReplay, AuditInProgress, AuditConflict:
		return true
	}
	return false
}

// AuditKinds returns every kind, in the order above (a new slice each call).
func AuditKinds() []AuditKind {
	return []AuditKind{AuditClaimed, AuditExpiredReclaim, AuditTakeover, AuditRetried, AuditAbandoned,
		AuditReleased, AuditCanceled, AuditReplay, AuditInProgress, AuditConflict, AuditReset, AuditForced}
}

// How an in_progress answer was given (AuditEvent.Detail).
const (
	InProgressAnswered = "answered" // told at once (409, or 202 for an async start)
	InProgressWaited   = "waited"   // waited (Call.Wait) and then told it still runs
	InProgressAttached = "attached" // followed the running stream's events
)

// KeyPrefixLen is how many hex characters of a key hash an audit event
// shows (64 bits): enough to tell keys apart in a tenant's trail, and
// useless for guessing the key, which only the HMAC secret's holder could
// check anyway.
const KeyPrefixLen = 16

// AuditEvent is one idempotency decision. It never holds a raw key, the
// inputs, the answer or a credential: the key appears as its HMAC (and only
// a prefix of it in JSON), the caller as Actor.
type AuditEvent struct {
	// ID identifies the event in every sink (32 hex characters, ordered by
	// creation time to the millisecond); a sink that sees an ID twice saw
	// one event twice.
	ID   string
	Kind AuditKind
	// At is the database's clock at the read the decision came from
	// (Record.Now); the service's clock for the decisions no read precedes
	// (the claim of a key not seen before, a release, a replay from the
	// replay cache).
	At      time.Time
	Tenant  string
	Scope   string
	KeyHash string // the key's HMAC (the row's key_hash); JSON shows KeyPrefixLen characters of it
	// Attempt is the execution the event is about: the one a claim starts,
	// a replay answers, a conflict or a duplicate met.
	Attempt int
	// Actor is who asked (Call.Actor): "" when the caller is not known.
	Actor string
	// OriginalAt is, on a replay, when the replayed answer was stored.
	OriginalAt time.Time
	// StopReason is, on abandoned, why the claim was stored failed.
	StopReason sanitize.StopReason
	// Detail is, on in_progress, how the duplicate was answered
	// (InProgressAnswered, InProgressWaited, InProgressAttached).
	Detail string
	// Replay is, on a replay read back by Guard.History, the number of its
	// first replay among the key's replays (1 for the first, counted in the
	// order of the tallies' first times); 0 everywhere else.
	Replay int
	// Count is, on a tally (a replay, in_progress or conflict kind) read
	// back by History or handed to Store.AppendAudit, how many such events
	// it holds (at least 1); 0 on a single event, as Config.Observe and
	// the stream see them.
	Count int64
	// LastAt is, on a tally, the time of its latest event (At is the
	// earliest's); zero on a single event.
	LastAt time.Time
}

// KeyPrefix is the part of KeyHash the event shows.
func (e AuditEvent) KeyPrefix() string { return e.KeyHash[:min(KeyPrefixLen, len(e.KeyHash))] }

// auditJSON is an AuditEvent as JSON: the key hash only as its prefix.
type auditJSON struct {
	ID         string              `json:"id"`
	Kind       AuditKind           `json:"kind"`
	At         time.Time           `json:"at"`
	Tenant     string              `json:"tenant"`
	Scope      string              `json:"scope"`
	KeyPrefix  string              `json:"keyPrefix"`
	Attempt    int                 `json:"attempt"`
	Actor      string              `json:"actor,omitempty"`
	OriginalAt *time.Time          `json:"originalAt,omitempty"`
	StopReason sanitize.StopReason `json:"stopReason,omitempty"`
	Detail     string              `json:"detail,omitempty"`
	Replay     int                 `json:"replay,omitempty"`
	Count      int64               `json:"count,omitempty"`
	LastAt     *time.Time          `json:"lastAt,omitempty"`
}

// MarshalJSON writes the event for an audit stream or a key's history: the
// key hash appears only as KeyPrefix.
func (e AuditEvent) MarshalJSON() ([]byte, error) {
	j := auditJSON{ID: e.ID, Kind: e.Kind, At: e.At.UTC(), Tenant: e.Tenant, Scope: e.Scope, KeyPrefix: e.KeyPrefix(),
		Attempt: e.Attempt, Actor: e.Actor, StopReason: e.StopReason, Detail: e.Detail, Replay: e.Replay, Count: e.Count}
	if !e.OriginalAt.IsZero() {
		t := e.OriginalAt.UTC()
		j.OriginalAt = &t
	}
	if !e.LastAt.IsZero() {
		t := e.LastAt.UTC()
		j.LastAt = &t
	}
	return json.Marshal(j)
}
