package idemguard

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/idemguard/idemguard/sanitize"
)

// AuditKind names an idempotency decision in the audit trail.
type AuditKind string

// The decisions the audit trail records. The first seven change the row and
// are durable with that change (see AuditConfig.Store); the last three only
// read it and are written in batches.
const (
	AuditClaimed        AuditKind = "key.claimed"     // a key absent until now was claimed (attempt 1)
	AuditExpiredReclaim AuditKind = "expired_reclaim" // an expired row was claimed afresh (attempt 1)
	AuditTakeover       AuditKind = "takeover"        // a stale claim was taken over (the next attempt)
	AuditRetried        AuditKind = "retried"         // a stored retryable failure was claimed again
	AuditAbandoned      AuditKind = "abandoned"       // a stale claim was stored failed; StopReason says why
	AuditReleased       AuditKind = "released"        // a claim whose operation never ran was given back
	AuditCanceled       AuditKind = "canceled"        // a cancel of the running execution was recorded
	AuditReplay         AuditKind = "replay"          // a stored answer was replayed; OriginalAt is its completion
	AuditInProgress     AuditKind = "in_progress"     // a duplicate found the key running; Detail says how it was answered
	AuditConflict       AuditKind = "conflict"        // a client key was reused with other inputs (422)
)

// Durable reports whether events of kind k change the row, and so are
// written in the same transaction as the change.
func (k AuditKind) Durable() bool {
	switch k {
	case AuditReplay, AuditInProgress, AuditConflict:
		return false
	}
	return true
}

// AuditKinds lists every kind, in the order above.
var AuditKinds = []AuditKind{AuditClaimed, AuditExpiredReclaim, AuditTakeover, AuditRetried, AuditAbandoned,
	AuditReleased, AuditCanceled, AuditReplay, AuditInProgress, AuditConflict}

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

// MaxActorLen is the longest Call.Actor accepted.
const MaxActorLen = 128

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
	// Replay is, on a replay read back by Guard.History, its number among
	// the key's replays (1 for the first); 0 everywhere else.
	Replay int
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
}

// MarshalJSON writes the event for an audit stream or a key's history: the
// key hash appears only as KeyPrefix.
func (e AuditEvent) MarshalJSON() ([]byte, error) {
	j := auditJSON{ID: e.ID, Kind: e.Kind, At: e.At.UTC(), Tenant: e.Tenant, Scope: e.Scope, KeyPrefix: e.KeyPrefix(),
		Attempt: e.Attempt, Actor: e.Actor, StopReason: e.StopReason, Detail: e.Detail, Replay: e.Replay}
	if !e.OriginalAt.IsZero() {
		t := e.OriginalAt.UTC()
		j.OriginalAt = &t
	}
	return json.Marshal(j)
}

// AuditConfig is Config.Audit. Auditing is off (and costs nothing) unless
// Observe is set or Store is true.
type AuditConfig struct {
	// Observe, if set, receives every audit event on the deciding call's
	// goroutine, once the change a durable event describes is stored: keep
	// it fast (hand the event to a queue). A panic is logged and the event
	// lost for this sink.
	Observe func(AuditEvent)
	// Store writes the events to the store (the idempotency_audit table).
	// The durable kinds are written in the same transaction as the row
	// change they describe, so a crash can never keep one without the
	// other. Replays, in-progress answers and conflicts are queued and
	// written in batches off the request path; when the queue is full they
	// are dropped and counted (EventAuditDropped), never waited for.
	Store bool
	// QueueSize bounds the batched events waiting to be written. Defaults
	// to 10,000.
	QueueSize int
	// BatchSize is the most events one batch writes. Defaults to 500.
	BatchSize int
	// FlushEvery is the longest a queued event waits for its batch.
	// Defaults to 200ms.
	FlushEvery time.Duration
}

func (c AuditConfig) on() bool { return c.Observe != nil || c.Store }

func (c AuditConfig) validate() error {
	if c.QueueSize < 0 || c.BatchSize < 0 || c.FlushEvery < 0 {
		return fmt.Errorf("idemguard: Config.Audit sizes and FlushEvery must not be negative (0 means the default)")
	}
	return nil
}

// validActor checks Call.Actor: printable, at most MaxActorLen bytes.
func validActor(a string) error {
	if len(a) > MaxActorLen {
		return fmt.Errorf("Actor must be at most %d bytes, got %d", MaxActorLen, len(a))
	}
	if strings.IndexFunc(a, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Errorf("Actor must be printable")
	}
	return nil
}

type actorKey struct{}

// WithActor returns ctx carrying actor, the caller named in audit events
// of the calls made with ctx that leave Call.Actor empty, and of
// Guard.Cancel. Authentication middleware sets it once per request.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFrom returns the actor WithActor put in ctx, or "".
func ActorFrom(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}

// newAuditID returns a 32-hex-character event id: 48 bits of Unix
// milliseconds, a 16-bit counter of this process, then 64 random bits
// (two processes' ids collide with odds of 2^-64 per pair made in the
// same millisecond with the same counter), so
// ids sort by creation time, and in the order made within one process.
func newAuditID(now time.Time) string {
	var b [16]byte
	ms := uint64(now.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	n := auditSeq.Add(1)
	b[6], b[7] = byte(n>>8), byte(n)
	// An id needs to be unique, not secret: the runtime's per-thread
	// ChaCha8 (math/rand/v2) is enough, and far cheaper than crypto/rand
	// on a cached replay's path.
	binary.BigEndian.PutUint64(b[8:], rand.Uint64())
	return hex.EncodeToString(b[:])
}

var auditSeq atomic.Uint32
