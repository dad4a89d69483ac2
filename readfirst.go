package idemguard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/idemguard/idemguard/internal/testhooks"
	"github.com/idemguard/idemguard/store"
)

// Read-first replay
//
// The claim INSERT comes first because it alone decides ownership (the
// unique key lets one caller win): for a fresh key it is already the claim. A replay the in-process
// cache cannot answer therefore pays an INSERT that fails with 1062, then
// the SELECT: two round trips where a plain read needs one. Reading the row
// first turns a replay into one SELECT, at the price of one extra SELECT for
// a key that turns out to be fresh.
//
// The read never decides ownership. Only a row that is succeeded, not
// expired on the store's clock and carries the call's fingerprint is
// answered from it (a succeeded row is final until it expires: the replay
// cache relies on the same fact). Anything else (no row, a started, failed
// or expired row, another fingerprint) falls through to the normal path,
// which claims with the INSERT or a guarded UPDATE and reads the row again
// for itself: what the first read saw may have changed since.
//
// When to read first is a test knob (idemguardtest.SetReadFirst). The default, testhooks.ReadFirstAdaptive,
// keeps per scope an exponentially weighted share of recent store calls that
// found a replayable row ("the claim INSERT would hit 1062 and replay") and
// reads first while that share is at least readFirstThreshold. Fresh keys
// (share near 0) keep the single-INSERT write path; replay-heavy scopes
// (share near 1) get SELECT-speed replays. Every call updates the share,
// whichever path it took, so a scope whose mix changes switches within a
// few dozen calls. docs/BENCHMARKS.md has the measurements behind the choice.

// Adaptive read-first tuning. The share is kept as a fixed-point fraction of
// rateOne; each call moves it 1/rateWeight of the way toward 0 (no replayable
// row) or 1 (replayable row).
const (
	rateOne    = 1 << 16
	rateWeight = 8
	// readFirstThreshold: a read first costs a fresh key one SELECT and saves
	// a replay a failing INSERT (about one SELECT's cost, see BENCHMARKS.md),
	// so it pays from a share of about one half.
	readFirstThreshold = rateOne / 2
	// maxTrackedScopes bounds the per-scope table; further scopes share one
	// entry (scopes are configuration, so a real deployment stays far below).
	maxTrackedScopes = 1024
)

// hitRates is the adaptive policy's per-scope state. Its zero value is ready.
type hitRates struct {
	scopes   sync.Map // scope → *hitRate
	tracked  atomic.Int32
	overflow hitRate
}

// hitRate is one scope's share of replayable rows, in units of 1/rateOne.
type hitRate struct{ v atomic.Uint32 }

func (h *hitRates) of(scope string) *hitRate {
	if r, ok := h.scopes.Load(scope); ok {
		return r.(*hitRate)
	}
	if h.tracked.Load() >= maxTrackedScopes {
		return &h.overflow
	}
	r, loaded := h.scopes.LoadOrStore(scope, &hitRate{})
	if !loaded {
		h.tracked.Add(1)
	}
	return r.(*hitRate)
}

// observe moves the share toward 1 (hit) or 0. Concurrent updates may lose
// one another's step; the share is a heuristic, not a count.
func (r *hitRate) observe(hit bool) {
	old := r.v.Load()
	target := uint32(0)
	if hit {
		target = rateOne
	}
	next := int64(old) + (int64(target)-int64(old))/rateWeight
	if hit && next == int64(old) {
		next++ // integer steps must still reach rateOne
	}
	r.v.CompareAndSwap(old, uint32(next))
}

func (r *hitRate) high() bool { return r.v.Load() >= readFirstThreshold }

// readFirstOrExecute is the call path after the replay cache missed: read the
// row first when the policy says so and answer a replayable row from it;
// otherwise (or when the read finds nothing replayable) run the claim path.
func (g *Guard) readFirstOrExecute(ctx context.Context, p prepared) (Result, error) {
	if p.noReadFirst {
		return g.execute(ctx, p)
	}
	var rate *hitRate
	read := false
	switch g.cfg.test.ReadFirst {
	case testhooks.ReadFirstAlways:
		read = true
	case testhooks.ReadFirstClientKey:
		read = p.hasKey
	case testhooks.ReadFirstNever:
	default: // testhooks.ReadFirstAdaptive
		rate = g.readFirst.of(p.scope)
		read = rate.high()
	}
	if read {
		readAt := g.now() // the cache entry's lifetime counts from before the read
		rp, rec, err := p, store.Record{}, error(nil)
		if len(p.versions) > 0 { // previous secrets: one read under every one (secrets.go)
			rp, rec, err = g.readFirstAny(ctx, p)
		} else {
			rec, err = g.get(ctx, p)
		}
		switch {
		case err == nil && replayable(rec, rp) && g.fresh(rp, readAt):
			if rate != nil {
				rate.observe(true)
			}
			return p.delivery.replay(ctx, g, rp, rec, readAt)
		case err != nil && !errors.Is(err, ErrNotFound):
			// Fail closed, as the claim would: the store does not answer.
			return Result{}, g.storeErr(ctx, p, "read", err)
		}
		// No row, or one the read cannot answer: the claim path decides.
	}
	res, err := g.execute(ctx, p)
	if rate != nil {
		rate.observe(err == nil && res.Cached && res.Status == StatusSucceeded)
	}
	return res, err
}

// replayable reports whether a row read before claiming may answer the call
// as a replay: succeeded (final until it expires), not expired on the
// store's clock, and made from the same inputs.
func replayable(rec store.Record, p prepared) bool {
	return rec.Status == store.RowSucceeded && !rec.Expired() && rec.Fingerprint == p.fingerprint
}
