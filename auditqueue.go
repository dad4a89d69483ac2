package idemguard

import (
	"sync"

	"github.com/idemguard/idemguard/store"
)

// auditQueue holds the read-only decisions (replays, in-progress answers,
// conflicts) waiting for the audit batch writer, fairly between tenants:
// at most size events in all and half of them per tenant, so one tenant's
// retry storm fills at most its half and the others' events still find
// room; the writer takes them round robin, one tenant's event after
// another's, so none waits behind another's backlog.
type auditQueue struct {
	mu      sync.Mutex
	size    int
	share   int
	n       int
	pending map[string]*tenantEvents // the tenants with events
	turn    []string                 // the tenants with events, in turn order
	next    int                      // the index in turn of the next tenant to take from
	free    []*tenantEvents          // emptied queues, kept for reuse
	// ready gets a token when the queue is half full. Below that the
	// writer sleeps until its tick: a writer woken by every event costs a
	// goroutine switch (often a thread's wake-up) per replay, for nothing
	// the tick would not do.
	ready  chan struct{}
	wakeAt int // the number of events that wakes the writer
}

// tenantEvents is one tenant's queued events, oldest first from head. Its
// array is reused: taken places are compacted away, and an emptied queue
// goes to the free list, so a steady stream of events allocates nothing.
type tenantEvents struct {
	evs  []store.AuditEvent
	head int
}

// maxFreeQueues bounds the emptied per-tenant queues kept for reuse (each
// at most a tenant's share of the queue).
const maxFreeQueues = 4

func newAuditQueue(size int) *auditQueue {
	return &auditQueue{size: size, share: max(1, size/2), pending: map[string]*tenantEvents{}, ready: make(chan struct{}, 1),
		wakeAt: max(1, size/2)}
}

// push queues e, or reports false when the queue, or e's tenant's share of
// it, is full.
func (q *auditQueue) push(e store.AuditEvent) bool {
	q.mu.Lock()
	mine := q.pending[e.Tenant]
	if q.n >= q.size || mine != nil && len(mine.evs)-mine.head >= q.share {
		q.mu.Unlock()
		return false
	}
	if mine == nil {
		mine = q.reuse()
		q.pending[e.Tenant] = mine
		q.turn = append(q.turn, e.Tenant)
	}
	if mine.head > 0 && len(mine.evs) == cap(mine.evs) {
		// Full at the back, free at the front: move the events down.
		mine.evs = mine.evs[:copy(mine.evs, mine.evs[mine.head:])]
		clear(mine.evs[len(mine.evs):cap(mine.evs)])
		mine.head = 0
	}
	mine.evs = append(mine.evs, e)
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

// reuse returns an emptied queue from the free list, or a new one.
func (q *auditQueue) reuse() *tenantEvents {
	if n := len(q.free); n > 0 {
		t := q.free[n-1]
		q.free = q.free[:n-1]
		return t
	}
	return &tenantEvents{}
}

// take appends queued events to batch, round robin between tenants, until
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
		batch = append(batch, t.evs[t.head])
		t.evs[t.head] = store.AuditEvent{} // holds no strings for the collector
		t.head++
		q.n--
		if t.head == len(t.evs) {
			delete(q.pending, tenant)
			q.turn = append(q.turn[:q.next], q.turn[q.next+1:]...)
			if t.evs, t.head = t.evs[:0], 0; len(q.free) < maxFreeQueues {
				q.free = append(q.free, t)
			}
			continue // the next tenant moved into this place
		}
		q.next++
	}
	return batch
}
