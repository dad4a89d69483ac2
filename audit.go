package idemguard

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/idemguard/idemguard/internal/ctxkeys"
)

// AuditConfig is Config.Audit. Auditing is off (and costs nothing) unless
// Observe or Store is true.
type AuditConfig struct {
	// Observe sends every audit decision to Config.Observe (which it then
	// requires) as an Event of kind EventAudit, on the deciding call's
	// goroutine, once the change a durable decision records is stored. There
	// is no second observer: metrics, cost figures and the audit trail
	// subscribe to a Guard the same way.
	Observe bool
	// Store writes the events to the store (on MySQL, the idempotency_audit
	// and idempotency_audit_tally tables). The durable kinds are stored with
	// the row change they describe, so a crash can never keep one without
	// the other: a claim's event on the row it inserts (no extra statement),
	// the others in the change's transaction. Replays, in-progress answers
	// and conflicts are counted in the process per key, kind, attempt,
	// actor and detail (how many, the first and the last time), and the
	// counts written in batches off the request path, which the store adds
	// to its own (store.Store.AppendAudit): a replay of a key counted
	// already costs one count. When a decision needs a new count and the
	// queue has no room for one, or a batch's write fails, its decisions are
	// dropped and counted (EventAuditDropped, one per decision), never
	// waited for.
	Store bool
	// QueueSize bounds the counts waiting to be written (each of any
	// number of decisions of one key and actor). Defaults to 10,000. The
	// queue is fair between tenants: one tenant's counts fill at most half
	// of it (past that its decisions needing a new count are dropped and
	// counted), and batches take the tenants' counts in turn.
	QueueSize int
	// BatchSize is the most counts one batch writes. Defaults to 500.
	BatchSize int
	// FlushEvery is the longest a decision waits for its batch: the writer
	// sleeps that long between batches unless the queue is half full.
	// Defaults to 1s.
	FlushEvery time.Duration
}

func (c AuditConfig) on() bool { return c.Observe || c.Store }

func (c AuditConfig) validate(observer bool) error {
	if c.Observe && !observer {
		return fmt.Errorf("idemguard: Config.Audit.Observe sends the audit events to Config.Observe, which is not set")
	}
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

// actorKey is ctxkeys.Actor, which an entry path may also set (together
// with the tenant) through a ctxkeys.Caller.
type actorKey = ctxkeys.Actor

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

// auditIDLen is the length of an event id (newAuditID).
const auditIDLen = 32

// newAuditID returns a 32-hex-character event id: 48 bits of Unix
// milliseconds, a 16-bit counter of this process, then 64 random bits
// (two processes' ids collide with odds of 2^-64 per pair made in the
// same millisecond with the same counter), so
// ids sort by creation time, and in the order made within one process.
func newAuditID(now time.Time) string {
	var id [auditIDLen]byte
	putAuditID(&id, now)
	return string(id[:])
}

// putAuditID writes a new event id (newAuditID) into id.
func putAuditID(id *[auditIDLen]byte, now time.Time) {
	var b [auditIDLen / 2]byte
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
	hex.Encode(id[:], b[:])
}

var auditSeq atomic.Uint32
