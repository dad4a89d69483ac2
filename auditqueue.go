package idemguard

import (
	"sync"
	"time"

	"github.com/idemguard/idemguard/store"
)

// auditQueue holds the read-only decisions (replays, in-progress answers,
// conflicts) waiting for the audit batch writer, already counted: one
// tally per (tenant, scope, key hash, kind, attempt, actor, detail), as
// the store keeps them (store.Store.AppendAudit), holding how many
// decisions it stands for, the earliest's ID, time and OriginalAt, and the
// latest's time. A decision whose tally is queued only adds to its count:
// a retry storm on a key costs one map update per request, and the writer
// hands the store a tally per key and actor, not an event per request.
//
// Only a new tally takes room, and the room is fair between tenants: at
// most size tallies in all and half of them per tenant, so one tenant's
// spread of keys fills at most its half and the others' still find room
// (a decision that finds no room is dropped and counted, as a full queue
// of events was); the writer takes them round robin, one tenant's tally
// after another's, so none waits behind another's backlog. Tallies taken
// by the writer leave the queue: the next decision of their key starts a
// new one, so no tally waits more than one flush.
type auditQueue struct {
	mu      sync.Mutex
	size    int
	share   int
	n       int
	pending map[string]*tenantTallies // the tenants with tallies
	turn    []string                  // the tenants with tallies, in turn order
	next    int                       // the index in turn of the next tenant to take from
	free    []*tenantTallies          // emptied queues, kept for reuse
	// ready gets a token when the queue is half full. Below that the
	// writer sleeps until its tick: a writer woken by every tally costs a
	// goroutine switch (often a thread's wake-up) for nothing the tick
	// would not do.
	ready  chan struct{}
	wakeAt int // the number of tallies that wakes the writer
}

// tenantTallies is one tenant's queued tallies, oldest first from head.
// Its array and map are reused: taken places are compacted away, and an
// emptied queue goes to the free list, so a steady stream of decisions
// allocates nothing. A tally's position is its index plus off, so that
// compacting moves no position (off grows instead).
type tenantTallies struct {
	tallies []tallySlot
	head    int
	off     int
	// latest finds a key hash's tallies: the position of the latest
	// tally whose key hash has its bucket (bucketOf), whose prev is the
	// position of the one before, and so on down to a taken one (below
	// off+head). A word from the hash is a fraction of the cost of
	// hashing a tally's whole key (scope, kind, attempt, actor, detail),
	// or the hash's 64 characters, on every replay.
	latest map[uint64]int
}

// bucketOf is the bucket of a key hash in tenantTallies.latest: its
// first 16 characters folded into a word (hex digits of an HMAC: 64
// random bits).
func bucketOf(keyHash string) uint64 {
	var w uint64
	for i := range min(16, len(keyHash)) {
		w ^= uint64(keyHash[i]) << (i % 8 * 8) << (i / 8 * 4)
	}
	return w
}

// tallySlot is a queued tally and the position of the previous tally of
// its key hash (-1: none).
type tallySlot struct {
	e    store.AuditEvent
	prev int
}

// find returns e's tally, or nil when none is queued.
func (t *tenantTallies) find(e *store.AuditEvent) *store.AuditEvent {
	pos, ok := t.latest[bucketOf(e.KeyHash)]
	for ok && pos >= t.off+t.head {
		s := &t.tallies[pos-t.off]
		if s.e.KeyHash == e.KeyHash && s.e.Kind == e.Kind && s.e.Attempt == e.Attempt && s.e.Actor == e.Actor &&
			s.e.Detail == e.Detail && s.e.Scope == e.Scope {
			return &s.e
		}
		pos = s.prev
	}
	return nil
}

// maxFreeQueues bounds the emptied per-tenant queues kept for reuse (each
// at most a tenant's share of the queue).
const maxFreeQueues = 4

func newAuditQueue(size int) *auditQueue {
	return &auditQueue{size: size, share: max(1, size/2), pending: map[string]*tenantTallies{}, ready: make(chan struct{}, 1),
		wakeAt: max(1, size/2)}
}

// add counts e, one decision (its ID may be empty: a new tally then gets
// one), in its tally, or reports false when e needs a new tally and the
// queue, or e's tenant's share of it, is full.
func (q *auditQueue) add(e *store.AuditEvent) bool {
	q.mu.Lock()
	mine := q.pending[e.Tenant]
	if mine != nil {
		if t := mine.find(e); t != nil {
			addToTally(t, e)
			q.mu.Unlock()
			return true
		}
	}
	if q.n >= q.size || mine != nil && len(mine.tallies)-mine.head >= q.share {
		q.mu.Unlock()
		return false
	}
	if mine == nil {
		mine = q.reuse()
		q.pending[e.Tenant] = mine
		q.turn = append(q.turn, e.Tenant)
	}
	mine.push(e)
	q.n++
	wake := q.n >= q.wakeAt
	q.mu.Unlock()
	if wake {
		select {
		case q.ready <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
	return true
}

// addToTally adds the decision e to its tally t: one more, the
// earliest's ID, time and OriginalAt, the latest's time.
func addToTally(t, e *store.AuditEvent) {
	t.Count++
	switch {
	case e.At.After(t.LastAt):
		t.LastAt = e.At
	case e.At.Before(t.At): // clocks apart: a store read's and the process's
		if e.ID == "" {
			e.ID = newAuditID(time.Now())
		}
		t.ID, t.At, t.OriginalAt = e.ID, e.At, e.OriginalAt
	}
}

// push starts e's tally at the back.
func (t *tenantTallies) push(e *store.AuditEvent) {
	if t.head > 0 && len(t.tallies) == cap(t.tallies) {
		// Full at the back, free at the front: move the tallies down.
		t.tallies = t.tallies[:copy(t.tallies, t.tallies[t.head:])]
		clear(t.tallies[len(t.tallies):cap(t.tallies)])
		t.off += t.head
		t.head = 0
	}
	if t.latest == nil {
		t.latest = map[uint64]int{}
	}
	b := bucketOf(e.KeyHash)
	prev, ok := t.latest[b]
	if !ok {
		prev = -1
	}
	t.latest[b] = len(t.tallies) + t.off
	s := tallySlot{e: *e, prev: prev}
	if s.e.ID == "" {
		s.e.ID = newAuditID(time.Now())
	}
	s.e.Count, s.e.LastAt = 1, s.e.At
	t.tallies = append(t.tallies, s)
}

// reuse returns an emptied queue from the free list, or a new one.
func (q *auditQueue) reuse() *tenantTallies {
	if n := len(q.free); n > 0 {
		t := q.free[n-1]
		q.free = q.free[:n-1]
		return t
	}
	return &tenantTallies{}
}

// take appends queued tallies to batch, round robin between tenants, until
// batch holds max or the queue is empty.
func (q *auditQueue) take(batch []store.AuditEvent, max int) []store.AuditEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(batch) < max && q.n > 0 {
		if q.next >= len(q.turn) {
			q.next = 0
		}
		tenant := q.turn[q.next]
		t := q.pending[tenant]
		s := &t.tallies[t.head]
		batch = append(batch, s.e)
		if b := bucketOf(s.e.KeyHash); t.latest[b] == t.off+t.head { // its bucket's last queued tally
			delete(t.latest, b)
		}
		*s = tallySlot{} // holds no strings for the collector
		t.head++
		q.n--
		if t.head == len(t.tallies) {
			delete(q.pending, tenant)
			q.turn = append(q.turn[:q.next], q.turn[q.next+1:]...)
			if t.tallies, t.head, t.off = t.tallies[:0], 0, 0; len(q.free) < maxFreeQueues {
				q.free = append(q.free, t)
			}
			continue // the next tenant moved into this place
		}
		q.next++
	}
	return batch
}
