package idemguard

import (
	"context"
	"errors"
	"time"
)

// RowStatus is the status column of idempotency_keys.
type RowStatus string

// The row states (see the package documentation for the transitions).
const (
	RowStarted   RowStatus = "started"
	RowSucceeded RowStatus = "succeeded"
	RowFailed    RowStatus = "failed"
)

// Store errors. A Store returns exactly these sentinels for the protocol
// outcomes named on its methods; any other error means the store could not
// answer and is reported to callers as ErrStoreUnavailable.
var (
	// ErrDuplicate is returned by Store.Claim when a row with the same
	// (tenant, scope, key_hash) exists.
	ErrDuplicate = errors.New("idemguard: row already exists")
	// ErrOutcomeUnknown marks a write whose effect the store cannot report:
	// the statement may or may not have applied (MySQL error 1213, a
	// deadlock victim or a multi-primary certification failure; 1205, a lock
	// wait timeout). A Store wraps the driver's error with it. The guard
	// treats it like any other store error on a write: it decides by
	// re-reading the row, never by the error.
	ErrOutcomeUnknown = errors.New("idemguard: outcome of the write unknown")
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

// Expired reports whether the row's expires_at has passed at r.Now.
func (r Record) Expired() bool { return !r.ExpiresAt.After(r.Now) }

// Stale reports whether a started row's last heartbeat is older than its
// owner's lease at r.Now. The lease is the owner's promise:
// the row's own Lease is used whenever it has one, so a reader whose
// StaleAfter differs (a rolling configuration change) judges the owner by
// what the owner promised; fallback is used only for rows without a lease.
func (r Record) Stale(fallback time.Duration) bool {
	return r.Status == RowStarted && r.lastSign().Before(r.Now.Add(-r.LeaseOr(fallback)))
}

// Reclaimable reports whether the row may be claimed afresh, as if it were
// absent: it expired at r.Now, and it is not a started row whose owner is
// still within its lease (a live owner is never displaced by expiry, however
// long it runs). fallback is the lease of a row that carries none.
func (r Record) Reclaimable(fallback time.Duration) bool {
	return r.Expired() && !(r.Status == RowStarted && !r.Stale(fallback))
}

// LeaseOr is r.Lease, or fallback when the row carries none.
func (r Record) LeaseOr(fallback time.Duration) time.Duration {
	if r.Lease > 0 {
		return r.Lease
	}
	return fallback
}

func (r Record) lastSign() time.Time {
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
	// Audit, when set, is written to the audit trail atomically with the
	// row: both or neither (see Store).
	Audit *AuditEvent
}

// ReclaimKind says which guarded transition back to started a Reclaim makes.
type ReclaimKind int

const (
	// ReclaimExpired re-claims a row whose expires_at has passed, as if it
	// were absent: attempt count 1, new fingerprint, response cleared, all
	// times reset. Guard: expires_at < now, and not a started row whose
	// heartbeat is younger than its lease (a live owner is never displaced
	// by expiry).
	ReclaimExpired ReclaimKind = iota + 1
	// ReclaimStale takes over a started row whose heartbeat is older than
	// its lease: attempt count + 1, started_at = heartbeat_at = now.
	ReclaimStale
	// ReclaimFailed retries a failed row while attempt_count < MaxAttempts:
	// status started, attempt count + 1, response cleared.
	ReclaimFailed
)

func (k ReclaimKind) String() string {
	switch k {
	case ReclaimExpired:
		return "expired"
	case ReclaimStale:
		return "stale"
	case ReclaimFailed:
		return "failed"
	}
	return "unknown"
}

// ReclaimParams are the arguments of Store.Reclaim. The UPDATE is guarded by
// ID, OldNonce and OldAttempts (every transition that changes attempt_count
// also changes the nonce) and by the Kind's own condition, evaluated with the
// store's clock. Staleness is judged with the row's stored lease; StaleAfter
// stands in only for a row that has none.
type ReclaimParams struct {
	Kind        ReclaimKind
	ID          uint64
	OldNonce    string
	OldAttempts int
	NewNonce    string
	Fingerprint string        // ReclaimExpired: the new request's fingerprint
	SecretID    string        // ReclaimExpired: the secret id of the new request's fingerprint
	TTL         time.Duration // ReclaimExpired, ReclaimFailed: expires_at >= now + TTL
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

// Store keeps the idempotency records: NewMemoryStore, or package mysql's
// NewStore. It is exported so that the MySQL store can live in its own
// package, not as an invitation: a Store is not meant to be implemented
// outside this module. The guarantees of Guard.Do (one execution in flight
// per key, a replaced owner never overwrites the new owner's answer) rest on
// the exact semantics of every method below (which write wins a race, what a
// guarded update reports), and each implementation here is proven against
// one conformance suite that other modules cannot run. Methods may be added
// in any release.
//
// Implementations are safe for concurrent use, by many goroutines and (for
// shared stores) many processes; every method is a single atomic statement
// (or, when its params carry an Audit event, one transaction that writes
// the row change and the event together, or neither), and the bool results report whether exactly one row was changed by a
// guarded update. Every guarded update changes at least one column of the
// row it matches (a new nonce, a new status or a new microsecond
// timestamp), so "rows changed", which is what MySQL reports, equals "rows
// matched".
type Store interface {
	// Claim inserts a started row with attempt_count 1, started_at =
	// heartbeat_at = now and expires_at = now + TTL, and returns its id. If a
	// row with the same (tenant, scope, key_hash) exists, Claim must return
	// ErrDuplicate.
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
	Reclaim(ctx context.Context, p ReclaimParams) (bool, error)
	// Abandon marks a stale started row failed with p.Response; it reports
	// whether it changed the row.
	Abandon(ctx context.Context, p AbandonParams) (bool, error)
	// Heartbeat sets heartbeat_at = now on the started row id owned by
	// nonce, and reports whether it still owns it.
	Heartbeat(ctx context.Context, id uint64, nonce string) (bool, error)
	// Complete moves the started row id owned by nonce to p.Status with the
	// response, completed_at = now and expires_at = now + TTL, and returns
	// the completed_at it wrote (the store's clock), so that a replay from
	// memory carries the same time as one read from the store. false means
	// the row is no longer ours: nothing was written.
	Complete(ctx context.Context, p CompleteParams) (ok bool, completedAt time.Time, err error)
	// Release undoes a claim whose operation never ran: guarded by id,
	// status started and claim_nonce = p.Nonce, it deletes the row when
	// p.Prev is nil and otherwise restores p.Prev's status, nonce, attempt
	// count, response, times and lease, so no attempt is burnt and nothing
	// is marked abandoned. It reports whether it changed the row.
	Release(ctx context.Context, p ReleaseParams) (bool, error)
	// Ping reports whether the store can answer.
	Ping(ctx context.Context) error
	// Renew is the heartbeat of a running execution (see RenewParams): it
	// sets heartbeat_at = now and expires_at = at least now + p.Extend on
	// the started row p.ID owned by p.Nonce, and reports whether it still
	// owns it and whether a cancel was requested.
	Renew(ctx context.Context, p RenewParams) (RenewResult, error)
	// RequestCancel records a cancel request (cancel_requested_at = now) on
	// the started row p.ID owned by p.Nonce, and reports whether it changed
	// the row; false means the row is no longer that execution: re-read.
	RequestCancel(ctx context.Context, p CancelParams) (bool, error)
	// AppendAudit writes events to the audit trail, skipping any whose ID
	// is already there (a batch retried after an unknown outcome).
	AppendAudit(ctx context.Context, events []AuditEvent) error
	// History returns the audit events of (tenant, scope) whose KeyHash is
	// one of keyHashes, oldest first (by At, then ID), at most limit.
	History(ctx context.Context, tenant, scope string, keyHashes []string, limit int) ([]AuditEvent, error)
}
