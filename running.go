package idemguard

import (
	"context"
	"sync"
	"time"
)

// runningOps are the operations running in this process under a claim,
// each by its heartbeat, so that the end of the Guard's lifetime (Close)
// cancels them (cause ErrShuttingDown). One context.AfterFunc on the
// lifetime per Guard does it for all: one per operation would allocate its
// callback, its context and its stop function on every call, and add each
// operation to, and remove it from, the lifetime's children. The list is
// intrusive (heartbeat.runPrev, runNext): adding allocates nothing.
//
// The list also arms the operations' renewal timers (heartbeat.go): a
// sweep, due within half a renewal interval of every operation added,
// arms the timers of those still running. While operations keep starting
// the sweep comes once per half interval (StaleAfter/6 by default), not
// once per operation; with none running, it is not due at all.
type runningOps struct {
	mu     sync.Mutex
	head   *heartbeat
	closed bool // the lifetime ended: an operation added now is cancelled at once

	sweeper *time.Timer // runs sweep; nil until the first operation is added
	sweepAt time.Time   // when the next sweep is due; zero: none is
}

// watch cancels every running operation when lifetime ends.
func (r *runningOps) watch(lifetime context.Context) {
	context.AfterFunc(lifetime, r.cancelAll)
}

// add counts hb's operation among the running ones, or cancels it at once
// when the lifetime has ended (as context.AfterFunc on an ended context);
// a cancelled operation may still run a while and commit, so then its
// renewal timer is armed at once, as no sweep comes any more.
func (r *runningOps) add(hb *heartbeat) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		hb.armRenewal()
		hb.cancel(ErrShuttingDown)
		return
	}
	hb.runNext = r.head
	if r.head != nil {
		r.head.runPrev = hb
	}
	r.head = hb
	r.sweepBy(hb.start.Add(hb.every/2), hb.every/2)
	r.mu.Unlock()
}

// sweepBy makes sure a sweep comes by at, in d (r.mu held).
func (r *runningOps) sweepBy(at time.Time, d time.Duration) {
	switch {
	case !r.sweepAt.IsZero() && !r.sweepAt.After(at):
		return // one is due by then already
	case r.sweeper == nil:
		r.sweeper = time.AfterFunc(d, r.sweep)
	default:
		r.sweeper.Reset(d)
	}
	r.sweepAt = at
}

// sweep arms the renewal timer of every running operation. The list is
// read after the sweep that was due is marked done: an operation added
// since it came due is in the list, and one added later makes the next.
func (r *runningOps) sweep() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweepAt = time.Time{}
	for hb := r.head; hb != nil; hb = hb.runNext {
		hb.armRenewal()
	}
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

// cancelAll cancels every running operation, and any added later. No
// sweep comes after it: the operations, which may still run a while (the
// grace period of Close) and commit, get their renewal timers now.
func (r *runningOps) cancelAll() {
	r.mu.Lock()
	r.closed = true
	if r.sweeper != nil {
		r.sweeper.Stop()
	}
	head := r.head
	r.head = nil
	var cancels []context.CancelCauseFunc
	for hb := head; hb != nil; hb = hb.runNext {
		hb.armRenewal()
		cancels = append(cancels, hb.cancel)
	}
	r.mu.Unlock()
	for _, cancel := range cancels {
		cancel(ErrShuttingDown)
	}
}
