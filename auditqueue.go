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
	pending map[string][]store.AuditEvent // per tenant, oldest first
	turn    []string                      // the tenants with events, in turn order
	next    int                           // the index in turn of the next tenant to take from
	// ready gets a token when the queue is half full. Below that the
	// writer sleeps until its tick: a writer woken by every event costs a
	// goroutine switch (often a thread's wake-up) per replay, for nothing
	// the tick would not do.
	ready  chan struct{}
	wakeAt int // the number of events that wakes the writer
}

func newAuditQueue(size int) *auditQueue {
	return &auditQueue{size: size, share: max(1, size/2), pending: map[string][]store.AuditEvent{}, ready: make(chan struct{}, 1),
		wakeAt: max(1, size/2)}
}

// push queues e, or reports false when the queue, or e's tenant's share of
// it, is full.
func (q *auditQueue) push(e store.AuditEvent) bool {
	q.mu.Lock()
	mine := q.pending[e.Tenant]
	if q.n >= q.size || len(mine) >= q.share {
		q.mu.Unlock()
		return false
	}
	if len(mine) == 0 {
		q.turn = append(q.turn, e.Tenant)
	}
	q.pending[e.Tenant] = append(mine, e)
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
		evs := q.pending[tenant]
		batch = append(batch, evs[0])
		q.n--
		if len(evs) == 1 {
			delete(q.pending, tenant)
			q.turn = append(q.turn[:q.next], q.turn[q.next+1:]...)
			continue // the next tenant moved into this place
		}
		evs[0] = store.AuditEvent{}
		q.pending[tenant] = evs[1:]
		q.next++
	}
	return batch
}
