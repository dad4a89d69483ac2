package idemguard

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// leaseMargin is how long before its lease runs out an owner cancels its
// own operation: a tenth of the lease, at least 100ms (at most a third of
// it). It absorbs the time between the timer firing and the operation
// noticing on a busy machine, and any drift between this host's monotonic
// clock and the database's.
func leaseMargin(lease time.Duration) time.Duration {
	return min(max(lease/10, 100*time.Millisecond), lease/3)
}

// heartbeat keeps a claim's lease (the owner's promise, StaleAfter, of
// how long it may go silent) while the operation runs and
// while its outcome is committed.
//
// The lease is counted from the *start* of the last successful renewal (the
// claim or takeover write is the first): the database stamps heartbeat_at
// while the statement executes, which is never before it was sent, so
// "sent + StaleAfter" is never later than the instant another process may
// judge the row stale. The owner cancels its operation (cause
// ErrOwnershipLost) on its own timer at that instant minus leaseMargin,
// whether or not the database answers. Renewals run every StaleAfter/3; a
// renewal that changes no row means the claim was taken over, and cancels
// the operation at once. A renewal that fails (unknown outcome) is retried
// soon and never cancels anything by itself: only the lease timer or a
// decisive answer from the row does.
//
// It runs on timers (time.AfterFunc), not on a goroutine of its own, and
// most operations finish long before the first beat is due: so the
// renewal timer is not armed when the operation starts but by the Guard's
// sweep of its running operations (runningOps.sweep), which comes within
// half a renewal interval of the start and arms the timers of those still
// running, for their first beat at start + every, as before. An operation
// that ends before a sweep costs no timer at all (measured with
// internal/bench: a timer added to and removed from the runtime's heap
// per fresh key). The lease's own timer is armed by the first beat, before
// it renews: that beat is due before the lease ends (every StaleAfter/3,
// the end StaleAfter less the margin), and a lease that ends first gets
// its timer at the start.
type heartbeat struct {
	g *Guard
	p prepared
	// The claim: owned's id, nonce and attempt (the rest of owned is not
	// the heartbeat's, and would take it past 512 bytes).
	id      uint64
	nonce   string
	attempt int
	cancel  context.CancelCauseFunc // the operation's
	lease   time.Duration
	every   time.Duration

	start time.Time // when the heartbeat started: the first beat is due every after it

	mu       sync.Mutex
	timer    *time.Timer // the next renewal; nil until armed (armRenewal)
	expiry   *time.Timer // the lease's end; nil until armed (armExpiry)
	deadline time.Time   // local monotonic time the lease ends (margin included)
	stopped  bool
	lost     bool // a renewal changed no row: another owner holds the row
	beating  sync.WaitGroup

	// cancelSeen: a renewal found a cancel request (async.go).
	cancelSeen atomic.Bool
	// progress holds the operation's latest report for the next renewal
	// (progress.go); nil until the operation reports.
	progress atomic.Pointer[progressSink]
	// opCtx is the operation's context; the heartbeat is the context the
	// operation gets: opCtx carrying the heartbeat as its progress sink
	// (progress.go), without an allocation of its own.
	opCtx context.Context

	// runPrev and runNext link the running operations (runningOps.mu).
	runPrev, runNext *heartbeat
}

// startHeartbeat starts the heartbeat of the claim o, whose first renewal
// the sweep of the running operations schedules (runningOps.add), and the
// lease timer if the lease ends before that renewal is due; cancel cancels
// the operation.
func (g *Guard) startHeartbeat(p prepared, o owned, cancel context.CancelCauseFunc) *heartbeat {
	lease := p.settings.StaleAfter
	hb := &heartbeat{g: g, p: p, id: o.id, nonce: o.nonce, attempt: o.attempt, cancel: cancel, lease: lease, every: cmp.Or(g.cfg.test.HeartbeatEvery, lease/3),
		start: time.Now()}
	hb.mu.Lock()
	defer hb.mu.Unlock()
	hb.deadline = o.leaseFrom.Add(lease - leaseMargin(lease))
	if hb.deadline.Sub(hb.start) <= hb.every {
		hb.armExpiry() // the lease ends before the first beat is due
	}
	return hb
}

// armRenewal schedules the first renewal, at start + every, unless it is
// scheduled already or the heartbeat stopped (runningOps.sweep).
func (hb *heartbeat) armRenewal() {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if hb.timer == nil && !hb.stopped {
		hb.timer = time.AfterFunc(time.Until(hb.start.Add(hb.every)), hb.beat)
	}
}

// armExpiry starts the lease's timer unless it runs already (hb.mu held).
func (hb *heartbeat) armExpiry() {
	if hb.expiry == nil {
		hb.expiry = time.AfterFunc(time.Until(hb.deadline), hb.expire)
	}
}

// beat renews the lease once and schedules the next renewal.
func (hb *heartbeat) beat() {
	hb.mu.Lock()
	if hb.stopped {
		hb.mu.Unlock()
		return
	}
	hb.beating.Add(1) // under mu, before stop can Wait
	hb.armExpiry()    // before the renewal, which may hang past the lease's end
	hb.mu.Unlock()
	defer hb.beating.Done()

	g, p := hb.g, hb.p
	// A slow renewal still counts from its start if it lands before the
	// lease ends, so it may take that long (bounded by StoreTimeout).
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), min(g.cfg.StoreTimeout, max(hb.left(), hb.every/3)))
	ok, err := hb.renewOnce(ctx)
	cancel()
	switch {
	case err == nil && ok:
		hb.renew(began.Add(hb.lease - leaseMargin(hb.lease)))
		hb.next(hb.every - time.Since(began))
	case err != nil:
		// Unknown: the lease stays counted from the last renewal that
		// is known to have landed; the next try comes soon.
		g.emit(Event{Kind: EventStoreError, Scope: p.scope, StoreOp: "heartbeat"})
		g.log.Warn("guard: heartbeat failed; retrying", g.attrs(p, slog.Any("err", err))...)
		hb.next(jitter(hb.every / 3))
	default:
		hb.mu.Lock()
		hb.lost = true
		hb.mu.Unlock()
		hb.cancel(ErrOwnershipLost)
		g.log.Warn("guard: claim taken over; cancelling the operation", g.attrs(p, slog.Int("attempt", hb.attempt))...)
	}
}

// expire cancels the operation when the lease ran out before a renewal
// landed.
func (hb *heartbeat) expire() {
	hb.mu.Lock()
	live := !hb.stopped && !time.Now().Before(hb.deadline)
	hb.mu.Unlock()
	if live {
		hb.cancel(ErrOwnershipLost)
		hb.g.log.Warn("guard: lease ran out before a renewal landed; cancelling the operation",
			hb.g.attrs(hb.p, slog.Int("attempt", hb.attempt))...)
	}
}

// renew moves the lease's end to deadline.
func (hb *heartbeat) renew(deadline time.Time) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if hb.stopped || !deadline.After(hb.deadline) {
		return
	}
	hb.deadline = deadline
	if hb.expiry != nil {
		hb.expiry.Reset(time.Until(deadline))
	}
}

// left is how much of the lease remains (negative once spent).
func (hb *heartbeat) left() time.Duration {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return time.Until(hb.deadline)
}

// takenOver reports whether a renewal found the row owned by someone else.
func (hb *heartbeat) takenOver() bool {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.lost
}

// next schedules the following beat after d (at once when d <= 0, like a
// ticker whose tick came due during a slow renewal), unless stopped.
func (hb *heartbeat) next(d time.Duration) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if !hb.stopped {
		hb.timer.Reset(max(d, 0))
	}
}

// stop ends the heartbeat and the lease timer and waits for a renewal in
// progress.
func (hb *heartbeat) stop() {
	hb.mu.Lock()
	hb.stopped = true
	if hb.timer != nil {
		hb.timer.Stop()
	}
	if hb.expiry != nil {
		hb.expiry.Stop()
	}
	hb.mu.Unlock()
	hb.beating.Wait()
}
