package idemguard

import (
	"context"
	"sync"
)

// runningOps are the operations running in this process under a claim,
// each by its heartbeat, so that the end of the Guard's lifetime (Close)
// cancels them (cause ErrShuttingDown). One context.AfterFunc on the
// lifetime per Guard does it for all: one per operation would allocate its
// callback, its context and its stop function on every call, and add each
// operation to, and remove it from, the lifetime's children. The list is
// intrusive (heartbeat.runPrev, runNext): adding allocates nothing.
type runningOps struct {
	mu     sync.Mutex
	head   *heartbeat
	closed bool // the lifetime ended: an operation added now is cancelled at once
}

// watch cancels every running operation when lifetime ends.
func (r *runningOps) watch(lifetime context.Context) {
	context.AfterFunc(lifetime, r.cancelAll)
}

// add counts hb's operation among the running ones, or cancels it at once
// when the lifetime has ended (as context.AfterFunc on an ended context).
func (r *runningOps) add(hb *heartbeat) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		hb.cancel(ErrShuttingDown)
		return
	}
	hb.runNext = r.head
	if r.head != nil {
		r.head.runPrev = hb
	}
	r.head = hb
	r.mu.Unlock()
}

// remove forgets hb's operation (it ended).
func (r *runningOps) remove(hb *heartbeat) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return // cancelAll took the list
	}
	if hb.runPrev != nil {
		hb.runPrev.runNext = hb.runNext
	} else if r.head == hb {
		r.head = hb.runNext
	}
	if hb.runNext != nil {
		hb.runNext.runPrev = hb.runPrev
	}
	hb.runPrev, hb.runNext = nil, nil
}

// cancelAll cancels every running operation, and any added later.
func (r *runningOps) cancelAll() {
	r.mu.Lock()
	r.closed = true
	head := r.head
	r.head = nil
	var cancels []context.CancelCauseFunc
	for hb := head; hb != nil; hb = hb.runNext {
		cancels = append(cancels, hb.cancel)
	}
	r.mu.Unlock()
	for _, cancel := range cancels {
		cancel(ErrShuttingDown)
	}
}
