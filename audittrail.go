package idemguard

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
	"unsafe"

	"github.com/idemguard/idemguard/store"
)

// The audit trail, as the engine writes it (audit.go has its shape).
// A durable event is made before the store write whose change it records,
// travels with that write (the write's Audit param: the claim's row itself,
// or one transaction in the store), and reaches Config.Observe (EventAudit)
// once the write is known to have landed. A read-only decision (replay, in
// progress, conflict) is observed at once and counted per key and actor
// (auditQueue) until the store's batch writer hands the store the counts.

// Defaults of AuditConfig.
const (
	DefaultAuditQueueSize  = 10_000
	DefaultAuditBatchSize  = 500
	DefaultAuditFlushEvery = time.Second
)

// auditor is a Guard's audit state; nil when auditing is off.
type auditor struct {
	observe bool // to Config.Observe (EventAudit)
	store   bool
	// processClock is true when the service's clock (Guard.now) is the
	// process's (time.Now, outside tests): a decision timed by it has the
	// reading an event ID needs already.
	processClock bool
	queue        *auditQueue // batched events for the store, fair between tenants; nil without Store
	batch        int
	every        time.Duration
	stop         chan struct{}
	done         chan struct{}
	once         sync.Once
}

func newAuditor(c AuditConfig, processClock bool) *auditor {
	if !c.on() {
		return nil
	}
	a := &auditor{observe: c.Observe, store: c.Store, processClock: processClock, batch: cmp.Or(c.BatchSize, DefaultAuditBatchSize),
		every: cmp.Or(c.FlushEvery, DefaultAuditFlushEvery), stop: make(chan struct{}), done: make(chan struct{})}
	if c.Store {
		a.queue = newAuditQueue(cmp.Or(c.QueueSize, DefaultAuditQueueSize))
	}
	return a
}

// newAudit makes a durable event about keyHash of p's call, or nil when
// auditing is off. at zero is the service's clock.
func (g *Guard) newAudit(p prepared, kind store.AuditKind, keyHash string, attempt int, at time.Time) *store.AuditEvent {
	if g.audit == nil {
		return nil
	}
	if at.IsZero() {
		at = g.now()
	}
	return &store.AuditEvent{ID: newAuditID(time.Now()), Kind: kind, At: at.UTC(), Tenant: p.tenant, Scope: p.scope,
		KeyHash: keyHash, Attempt: attempt, Actor: p.actor}
}

// after makes the durable event kind that follows e (the same key, attempt
// and actor), or nil when e is nil.
func (g *Guard) after(e *store.AuditEvent, kind store.AuditKind) *store.AuditEvent {
	if e == nil {
		return nil
	}
	return &store.AuditEvent{ID: newAuditID(time.Now()), Kind: kind, At: g.now().UTC(), Tenant: e.Tenant, Scope: e.Scope,
		KeyHash: e.KeyHash, Attempt: e.Attempt, Actor: e.Actor}
}

// stored is e when the store gets the trail (AuditConfig.Store), else nil:
// what a write carries into the store.
func (g *Guard) stored(e *store.AuditEvent) *store.AuditEvent {
	if e == nil || !g.audit.store {
		return nil
	}
	return e
}

// landed reports a durable event whose write is known to have landed to
// Config.Observe (the store has it already).
func (g *Guard) landed(e *store.AuditEvent) {
	if e != nil && g.audit.observe {
		g.observeAudit(*e)
	}
}

// note records e, a read-only decision about p's key (Kind, Attempt, At,
// OriginalAt and Detail set; At zero: the service's clock now): observed
// now, and counted in its tally for the store's next batch (dropped and
// counted if it needs a new tally and the queue has no room for it). local
// says At is a reading of the service's clock. Only the observer needs the
// event whole: without it, an ID is made only for a new tally.
func (g *Guard) note(p *prepared, e store.AuditEvent, local bool) {
	if e.At.IsZero() {
		e.At, local = g.now(), true
	}
	e.At = e.At.UTC()
	e.Tenant, e.Scope, e.KeyHash, e.Actor = p.tenant, p.scope, p.keyHash, p.actor
	if g.audit.observe {
		made := e.At // the process's clock, read a moment ago: no second reading
		if !local || !g.audit.processClock {
			made = time.Now()
		}
		rec := newObserved(&e, made)
		e.ID = rec.ID // a new tally's, too
		g.emit(Event{Kind: EventAudit, Tenant: e.Tenant, Scope: e.Scope, Audit: rec})
	}
	if g.audit.queue == nil {
		return
	}
	if !g.audit.queue.add(&e) {
		g.emit(Event{Kind: EventAuditDropped, Scope: p.scope, Field: "queue_full"})
	}
}

// observedAudit is the record of a decision handed to Config.Observe and
// the bytes of its ID, in one allocation: the record's ID is a string over
// id, which nothing writes once it is made. The observer may keep the
// record (Event.Audit) as long as it likes; the string keeps id alive.
type observedAudit struct {
	rec store.AuditEvent
	id  [auditIDLen]byte
}

// newObserved returns a copy of e, with a new ID made at made, for the
// observer.
func newObserved(e *store.AuditEvent, made time.Time) *store.AuditEvent {
	o := &observedAudit{rec: *e}
	putAuditID(&o.id, made)
	o.rec.ID = unsafe.String(&o.id[0], len(o.id))
	return &o.rec
}

// noteReplay records that res, a stored answer, was replayed; at is the
// database's clock at the read that found it.
func (g *Guard) noteReplay(p prepared, res Result, at time.Time) { g.noteReplayAt(p, res, at, false) }

// noteReplayAt records a replay of res at at; local says at is the
// service's clock (the replay cache answered).
func (g *Guard) noteReplayAt(p prepared, res Result, at time.Time, local bool) {
	if g.audit != nil {
		g.note(&p, store.AuditEvent{Kind: store.AuditReplay, Attempt: res.Attempt, At: at, OriginalAt: res.CompletedAt},
			local)
	}
}

// noteInProgress records that a duplicate found rec running, and how it
// was answered.
func (g *Guard) noteInProgress(p prepared, rec store.Record, detail string) {
	if g.audit != nil {
		g.note(&p, store.AuditEvent{Kind: store.AuditInProgress, Attempt: rec.Attempts, At: rec.Now, Detail: detail}, false)
	}
}

// noteConflict records a client key reused with other inputs; at is the
// database's clock at the read that found the row (zero: the replay cache
// did).
func (g *Guard) noteConflict(p prepared, attempt int, at time.Time) {
	if g.audit != nil {
		g.note(&p, store.AuditEvent{Kind: store.AuditConflict, Attempt: attempt, At: at}, false)
	}
}

// observeAudit reports an audit decision to Config.Observe; a panic there
// is logged once per kind and the event lost, never the call's protocol
// (emit).
func (g *Guard) observeAudit(e store.AuditEvent) {
	g.emit(Event{Kind: EventAudit, Tenant: e.Tenant, Scope: e.Scope, Audit: &e})
}

// startAuditWriter starts the batch writer when the store gets the trail.
func (g *Guard) startAuditWriter() {
	if g.audit == nil || g.audit.queue == nil {
		return
	}
	go g.writeAudit()
}

// writeAudit writes the queued tallies in batches of at most BatchSize, at
// least every FlushEvery (sooner when the queue is half full: auditQueue's
// ready), until stopAudit; then it writes what is left.
func (g *Guard) writeAudit() {
	a := g.audit
	defer close(a.done)
	tick := time.NewTicker(a.every)
	defer tick.Stop()
	var batch []store.AuditEvent // grows to what a tick brings, then reused
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if g.appendAudit(batch) {
			batch = batch[:0] // the store call is over: the slice is free again
			return
		}
		// A new slice, never the failed one: a store call that timed out
		// may still be sending it.
		batch = nil
	}
	// drain takes what is queued, writing each full batch.
	drain := func() {
		for batch = a.queue.take(batch, a.batch); len(batch) == a.batch; batch = a.queue.take(batch, a.batch) {
			flush()
		}
	}
	for {
		select {
		case <-a.queue.ready: // half full
		case <-tick.C:
		case <-a.stop:
			drain()
			flush()
			return
		}
		drain()
		flush()
	}
}

// appendAudit writes one batch of tallies. A batch the store provably
// never got (store.ErrNotSent) is tried once more; any other failure may have been
// written, and the store keeps replays, in-progress answers and conflicts
// as counts that cannot tell a repeat (store.Store.AppendAudit), so the
// batch is dropped and counted rather than perhaps counted twice.
func (g *Guard) appendAudit(batch []store.AuditEvent) (written bool) {
	var err error
	for try := range 2 {
		if try > 0 {
			time.Sleep(jitter(100 * time.Millisecond))
		}
		ctx, cancel := g.storeCtx(context.Background())
		err = g.store.AppendAudit(ctx, batch)
		cancel()
		if err == nil || !errors.Is(err, store.ErrNotSent) {
			break
		}
	}
	if err == nil {
		return true
	}
	var lost int64
	for _, e := range batch {
		lost += e.Count
	}
	g.log.Warn("guard: audit events not written", slog.Int64("events", lost), slog.Int("tallies", len(batch)),
		slog.Any("err", err))
	for _, e := range batch {
		for range e.Count { // each decision the tally counted, as metrics count them
			g.emit(Event{Kind: EventAuditDropped, Scope: e.Scope, Field: "store"})
		}
	}
	return false
}

// stopAudit writes what is queued and stops the batch writer, waiting at
// most until ctx ends.
func (g *Guard) stopAudit(ctx context.Context) error {
	if g.audit == nil || g.audit.queue == nil {
		return nil
	}
	g.audit.once.Do(func() { close(g.audit.stop) })
	select {
	case <-g.audit.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
