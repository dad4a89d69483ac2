package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/faulttest"
	"github.com/idemguard/idemguard/internal/testkeys"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// The guarantee at its edges: the lease is the owner's promise (the owner
// stops its operation before its lease runs out; others may take over only
// after), and every write whose outcome is unknown is decided by re-reading
// the row. The guard-level cases inject faults with a faulttest.Store around
// the harness's store, so both stores prove them.

func withStore(s store.Store) guardOpt { return func(c *idemguard.Config) { c.Store = s } }
func withStoreTimeout(d time.Duration) guardOpt {
	return func(c *idemguard.Config) { c.StoreTimeout = d }
}

// errUnknown stands for a write whose reply never came (a dropped
// connection, a timeout, a deadlock victim).
var errUnknown = fmt.Errorf("%w: %w", store.ErrOutcomeUnknown, faulttest.ErrInjected)

// rowsIn returns the dump lines of (tenant, scope).
func (h *Harness) rowsIn(t testing.TB, tenant, scope string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(h.Dump(t), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == tenant && f[1] == scope {
			out = append(out, line)
		}
	}
	return out
}

// A rolling change of stale_after: a reader with a shorter StaleAfter
// judges the row by the lease its owner stored, not by its own setting.
func storeStalenessIsJudgedByTheOwnersLease(t *testing.T, h *Harness) {
	kh := hash("lease")
	n := nonce()
	id, err := h.Store.Claim(ctxFor(t), store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: kh,
		Fingerprint: hash("fp"), Nonce: n, TTL: time.Hour, Lease: 10 * time.Minute})
	require.NoError(t, err)
	h.Age(t, "acme", "s", kh, 6*time.Minute)
	r := get(t, h, "acme", "s", kh)
	require.Equal(t, 10*time.Minute, r.Lease)
	require.False(t, r.Stale(5*time.Minute), "the owner promised 10m")
	won, err := h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimStale, ID: id, OldNonce: n,
		OldAttempts: 1, NewNonce: nonce(), StaleAfter: 5 * time.Minute, Lease: 5 * time.Minute})
	require.NoError(t, err)
	require.False(t, won, "a reader with a shorter StaleAfter took over a healthy run")
	won, err = h.Store.Abandon(ctxFor(t), store.AbandonParams{ID: id, OldNonce: n, OldAttempts: 1,
		StaleAfter: 5 * time.Minute, Response: []byte(`{"ok":false,"stopReason":"abandoned"}`), ResponseCode: 502, TTL: time.Hour})
	require.NoError(t, err)
	require.False(t, won, "a reader with a shorter StaleAfter abandoned a healthy run")

	h.Age(t, "acme", "s", kh, 5*time.Minute) // 11 minutes silent: past the owner's own lease
	r = get(t, h, "acme", "s", kh)
	require.True(t, r.Stale(time.Hour), "a reader with a longer StaleAfter still honours the shorter lease")
	next := nonce()
	won, err = h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimStale, ID: id, OldNonce: n,
		OldAttempts: 1, NewNonce: next, StaleAfter: time.Hour, Lease: 2 * time.Minute})
	require.NoError(t, err)
	require.True(t, won)
	r = get(t, h, "acme", "s", kh)
	require.Equal(t, 2*time.Minute, r.Lease, "the new owner's lease is stored")
	require.Equal(t, next, r.ClaimNonce)

	// A row without a lease (written before the column existed) is
	// judged with the reader's StaleAfter.
	kh2 := hash("no-lease")
	claimOne(t, h, "acme", "s", kh2)
	h.Age(t, "acme", "s", kh2, 6*time.Minute)
	r = get(t, h, "acme", "s", kh2)
	require.Zero(t, r.Lease)
	require.True(t, r.Stale(5*time.Minute))
	require.False(t, r.Stale(10*time.Minute))
}

// A claim whose caller was told "nothing ran" is given back: the row
// returns to where it was, no attempt is burnt, nothing is abandoned.
func storeReleaseGivesBackAClaimThatNeverRan(t *testing.T, h *Harness) {
	kh := hash("release")
	id, n := claimOne(t, h, "acme", "s", kh)
	won, err := h.Store.Release(ctxFor(t), store.ReleaseParams{ID: id, Nonce: nonce()})
	require.NoError(t, err)
	require.False(t, won, "another nonce releases nothing")
	won, err = h.Store.Release(ctxFor(t), store.ReleaseParams{ID: id, Nonce: n})
	require.NoError(t, err)
	require.True(t, won)
	_, err = h.Store.Get(ctxFor(t), "acme", "s", kh)
	require.ErrorIs(t, err, idemguard.ErrNotFound, "a released fresh claim is absent")

	// A retry of a failed row, released: the failed row comes back as it was.
	id, n = claimOne(t, h, "acme", "s", kh)
	ok, _, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowFailed,
		Response: []byte(`{"ok":false,"stopReason":"provider_error"}`), ResponseCode: 502, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
	failed := get(t, h, "acme", "s", kh)
	retry := nonce()
	won, err = h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimFailed, ID: id, OldNonce: n,
		OldAttempts: 1, NewNonce: retry, TTL: time.Hour, MaxAttempts: 3, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, won)
	won, err = h.Store.Release(ctxFor(t), store.ReleaseParams{ID: id, Nonce: retry, Prev: &failed})
	require.NoError(t, err)
	require.True(t, won)
	back := get(t, h, "acme", "s", kh)
	back.Now = failed.Now
	require.Equal(t, failed, back, "the failed row is restored, attempt count included")

	// A takeover, released: the stale row comes back, still stale.
	kh = hash("release-stale")
	id, n = claimOne(t, h, "acme", "s", kh)
	h.Age(t, "acme", "s", kh, 10*time.Minute)
	stale := get(t, h, "acme", "s", kh)
	took := nonce()
	won, err = h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimStale, ID: id, OldNonce: n,
		OldAttempts: 1, NewNonce: took, StaleAfter: 5 * time.Minute, Lease: 5 * time.Minute})
	require.NoError(t, err)
	require.True(t, won)
	won, err = h.Store.Release(ctxFor(t), store.ReleaseParams{ID: id, Nonce: took, Prev: &stale})
	require.NoError(t, err)
	require.True(t, won)
	back = get(t, h, "acme", "s", kh)
	require.Equal(t, stale.ClaimNonce, back.ClaimNonce)
	require.Equal(t, 1, back.Attempts)
	require.True(t, back.Stale(5*time.Minute))
	won, err = h.Store.Release(ctxFor(t), store.ReleaseParams{ID: id, Nonce: took, Prev: &stale})
	require.NoError(t, err)
	require.False(t, won, "a release is guarded by the nonce: twice changes nothing")
}

// The claim INSERT applied but its reply was lost: the row says we own it.
func guardLostClaimReplyIsSettledByTheRow(t *testing.T, h *Harness) {
	fs := faulttest.NewStore(h.Store)
	g, _ := newGuard(t, h, withStore(fs))
	fs.Inject(faulttest.OpClaim, faulttest.Fault{Apply: true, Err: errUnknown})
	var c counter
	res, err := g.Do(ctxFor(t), call("s", "lost-claim"), c.op(okValue, nil))
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.False(t, res.LostClaim)
	require.Equal(t, 1, c.n())
	requireReplay(t, g, call("s", "lost-claim"), c.op(okValue, nil), res)
	require.Equal(t, 1, c.n())
}

// The claim applied, its reply was lost, and the row could not be read
// either: the caller is told nothing ran, so the claim is given back
// once the store answers. Under policy fail the key is never marked
// abandoned, and the retry runs the operation once.
func guardUnsettledClaimLeavesNoClaimBehind(t *testing.T, h *Harness) {
	fs := faulttest.NewStore(h.Store)
	g, _ := newGuard(t, h, withStore(fs), withStoreTimeout(300*time.Millisecond))
	c := call("billed", "unsettled")
	c.Settings.StalePolicy = idemguard.StaleFail
	c.Settings.StaleAfter = idemguard.MinStaleAfter
	fs.Inject(faulttest.OpClaim, faulttest.Fault{Apply: true, Err: errUnknown})
	fs.Inject(faulttest.OpGet, faulttest.Fault{Err: faulttest.ErrInjected, Times: -1})
	var cnt counter
	_, err := g.Do(ctxFor(t), c, cnt.op(okValue, nil))
	require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
	require.Zero(t, cnt.n())
	require.Len(t, h.rowsIn(t, "acme", "billed"), 1, "the claim did land")
	fs.Clear(faulttest.OpGet) // the database answers again
	pollUntil(t, "the orphan claim to be released", func() bool { return len(h.rowsIn(t, "acme", "billed")) == 0 })
	time.Sleep(idemguard.MinStaleAfter) // past any lease the orphan could have had
	res, err := g.Do(ctxFor(t), c, cnt.op(okValue, nil))
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status, "never abandoned: it never ran")
	require.Equal(t, 1, res.Attempt, "no attempt was burnt")
	require.Equal(t, 1, cnt.n())
}

// Settling a lost claim reply took more than half the lease: the owner
// renews it with a heartbeat before the operation starts; if that
// renewal fails, the claim is given back and nothing runs.
func guardSpentLeaseIsRenewedBeforeTheOperationStarts(t *testing.T, h *Harness) {
	fs := faulttest.NewStore(h.Store)
	g, _ := newGuard(t, h, withStore(fs))
	const staleAfter = 600 * time.Millisecond
	slowRead := faulttest.Fault{After: func(context.Context) { time.Sleep(staleAfter/2 + 50*time.Millisecond) }}
	for _, renewal := range []error{nil, errUnknown} {
		c := call("s", fmt.Sprintf("renew-%v", renewal != nil))
		c.Settings.StaleAfter = staleAfter
		fs.Inject(faulttest.OpClaim, faulttest.Fault{Apply: true, Err: errUnknown})
		fs.Inject(faulttest.OpGet, slowRead)
		if renewal != nil {
			fs.Inject(faulttest.OpHeartbeat, faulttest.Fault{Err: renewal})
		}
		beatsBefore := fs.Calls(faulttest.OpHeartbeat)
		var beatsAtStart atomic.Int32
		res, err := g.Do(ctxFor(t), c, func(context.Context) (any, error) {
			beatsAtStart.Store(int32(fs.Calls(faulttest.OpHeartbeat) - beatsBefore))
			return okValue, nil
		})
		if renewal == nil {
			require.NoError(t, err)
			require.Equal(t, idemguard.StatusSucceeded, res.Status)
			require.EqualValues(t, 1, beatsAtStart.Load(), "the lease was not renewed before the operation")
			continue
		}
		require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
		require.Zero(t, beatsAtStart.Load(), "the operation ran on a spent lease")
		require.Len(t, h.rowsIn(t, "acme", "s"), 1, "the claim was not given back: only the first key's row may be left")
	}
}

// The caller hangs up while its claim INSERT waits (on a lock, say); the
// INSERT lands anyway. Nothing runs, and no claim is left behind.
func guardCallerHangUpDuringClaimLeavesNoClaim(t *testing.T, h *Harness) {
	fs := faulttest.NewStore(h.Store)
	g, _ := newGuard(t, h, withStore(fs))
	ctx, cancel := context.WithCancel(ctxFor(t))
	fs.Inject(faulttest.OpClaim, faulttest.Fault{Before: func(context.Context) { cancel() }})
	var cnt counter
	_, err := g.Do(ctx, call("s", "hang-up"), cnt.op(okValue, nil))
	require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, cnt.n())
	require.Empty(t, h.rowsIn(t, "acme", "s"), "a caller told nothing ran leaves no claim")
	res, err := g.Do(ctxFor(t), call("s", "hang-up"), cnt.op(okValue, nil))
	require.NoError(t, err)
	require.Equal(t, 1, res.Attempt)
	require.Equal(t, 1, cnt.n())
}

// The retry UPDATE of a failed key applied, its reply lost.
func guardLostReclaimReplyIsSettledByTheRow(t *testing.T, h *Harness) {
	fs := faulttest.NewStore(h.Store)
	g, _ := newGuard(t, h, withStore(fs))
	var cnt counter
	first, err := g.Do(ctxFor(t), call("s", "lost-reclaim"), cnt.op(nil, errors.New("upstream 500")))
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusFailed, first.Status)
	fs.Inject(faulttest.OpReclaim, faulttest.Fault{Apply: true, Err: errUnknown})
	res, err := g.Do(ctxFor(t), call("s", "lost-reclaim"), cnt.op(okValue, nil))
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.Equal(t, 2, res.Attempt)
	require.Equal(t, 2, cnt.n())
	row := h.find(t, "acme", "s")
	require.Equal(t, store.RowSucceeded, row.Status)
	require.Equal(t, 2, row.Attempts)

	// And a reclaim that did not land (the reply says nothing either):
	// the row is still failed, the next call retries it.
	second, err := g.Do(ctxFor(t), call("s", "lost-reclaim-2"), cnt.op(nil, errors.New("upstream 500")))
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusFailed, second.Status)
	fs.Inject(faulttest.OpReclaim, faulttest.Fault{Err: errUnknown})
	res, err = g.Do(ctxFor(t), call("s", "lost-reclaim-2"), cnt.op(okValue, nil))
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.Equal(t, 2, res.Attempt)
}

// The commit's outcome is unknown twice over: once rolled back (a
// deadlock victim), once applied with its reply lost. Either way the
// result is stored once and replayed; nothing runs twice.
func guardUnknownCommitOutcomeStillStoresTheResult(t *testing.T, h *Harness) {
	for _, apply := range []bool{false, true} {
		fs := faulttest.NewStore(h.Store)
		g, _ := newGuard(t, h, withStore(fs), withoutCache())
		c := call("s", fmt.Sprintf("commit-%v", apply))
		fs.Inject(faulttest.OpComplete, faulttest.Fault{Apply: apply, Err: errUnknown})
		var cnt counter
		res, err := g.Do(ctxFor(t), c, cnt.op(okValue, nil))
		require.NoError(t, err)
		require.Equal(t, idemguard.StatusSucceeded, res.Status)
		require.False(t, res.LostClaim, "an unknown outcome is not a lost claim")
		requireReplay(t, g, c, cnt.op(okValue, nil), res)
		require.Equal(t, 1, cnt.n())
	}
}

// A commit that fails for good while the row stays readable (and the
// heartbeats keep landing) is bounded too: the caller gets its result,
// unstored, after about one lease length.
func guardCommitThatAlwaysFailsIsBoundedByTheLease(t *testing.T, h *Harness) {
	fs := faulttest.NewStore(h.Store)
	g, _ := newGuard(t, h, withStore(fs), withHeartbeat(50*time.Millisecond))
	c := call("s", "commit-never")
	c.Settings.StaleAfter = 600 * time.Millisecond
	fs.Inject(faulttest.OpComplete, faulttest.Fault{Err: faulttest.ErrInjected, Times: -1})
	began := time.Now()
	res, err := g.Do(ctxFor(t), c, func(context.Context) (any, error) { return okValue, nil })
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status, "the caller still gets what it paid for")
	require.Less(t, time.Since(began), 5*time.Second)
	require.Greater(t, fs.Calls(faulttest.OpComplete), 1, "the commit was retried")
	require.Equal(t, store.RowStarted, h.find(t, "acme", "s").Status, "nothing was stored")
}

// Heartbeats that fail (a deadlock victim, a timeout) never cancel a
// healthy operation by themselves: the lease, renewed by the next good
// beat, decides.
func guardFailingHeartbeatsDoNotCancelAHealthyOperation(t *testing.T, h *Harness) {
	fs := faulttest.NewStore(h.Store)
	g, _ := newGuard(t, h, withStore(fs))
	c := call("s", "hb-deadlock")
	c.Settings.StaleAfter = 900 * time.Millisecond
	fs.Inject(faulttest.OpHeartbeat, faulttest.Fault{Err: errUnknown, Times: 2})
	var cancelled atomic.Bool
	res, err := g.Do(ctxFor(t), c, func(ctx context.Context) (any, error) {
		select {
		case <-time.After(1500 * time.Millisecond):
			return okValue, nil
		case <-ctx.Done():
			cancelled.Store(true)
			return nil, ctx.Err()
		}
	})
	require.NoError(t, err)
	require.False(t, cancelled.Load(), "a healthy operation was cancelled")
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.GreaterOrEqual(t, fs.Calls(faulttest.OpHeartbeat), 3, "the failed beats were retried")
	require.Equal(t, store.RowSucceeded, h.find(t, "acme", "s").Status)
}

// The store goes silent while the operation runs: the owner cancels it
// on its own timer, counted from the start of the claim, before anyone
// may judge the row stale.
func guardSilentStoreCancelsTheOperationBeforeItsLeaseEnds(t *testing.T, h *Harness) {
	fs := faulttest.NewStore(h.Store)
	g, _ := newGuard(t, h, withStore(fs), withStoreTimeout(5*time.Second))
	// Long enough that the lease's safety margin (10 %: 300 ms) covers a
	// busy machine's scheduling delay; 600 ms once missed by 3 ms at load 14.
	const staleAfter = 3 * time.Second
	c := call("s", "silent")
	c.Settings.StaleAfter = staleAfter
	silence := make(chan struct{})
	defer close(silence)
	fs.Inject(faulttest.OpHeartbeat, faulttest.Fault{Times: -1, Before: func(ctx context.Context) {
		select { // a heartbeat that never gets an answer
		case <-ctx.Done():
		case <-silence:
		}
	}})
	var endedAfter atomic.Int64
	var cause atomic.Value
	began := time.Now()
	_, err := g.Do(ctxFor(t), c, func(ctx context.Context) (any, error) {
		select {
		case <-ctx.Done():
			endedAfter.Store(int64(time.Since(began)))
			cause.Store(context.Cause(ctx))
			return nil, ctx.Err()
		case <-time.After(10 * staleAfter):
			return okValue, nil
		}
	})
	require.NoError(t, err)
	require.NotNil(t, cause.Load(), "the operation was never cancelled")
	require.ErrorIs(t, cause.Load().(error), idemguard.ErrOwnershipLost)
	require.Less(t, time.Duration(endedAfter.Load()), staleAfter,
		"the operation outlived its lease: another process could have taken the key over")
}

// Guard.Close lands between the claim and the operation: nothing runs,
// nothing is stored as abandoned, and the key is free.
func guardCloseRacingAClaimRunsNothingAndAbandonsNothing(t *testing.T, h *Harness) {
	fs := faulttest.NewStore(h.Store)
	g, _ := newGuard(t, h, withStore(fs))
	probe, _ := newGuard(t, h)
	claiming, closing := make(chan struct{}), make(chan struct{})
	fs.Inject(faulttest.OpClaim, faulttest.Fault{Before: func(context.Context) {
		close(claiming)
		<-closing
	}})
	c := call("billed", "close-race")
	c.Settings.StalePolicy = idemguard.StaleFail
	var ran atomic.Int32
	type answer struct {
		res idemguard.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := g.Do(context.Background(), c, func(ctx context.Context) (any, error) {
			ran.Add(1)
			<-ctx.Done()
			return nil, ctx.Err()
		})
		done <- answer{r, err}
	}()
	<-claiming
	closed := make(chan error, 1)
	go func() { closed <- g.Close(ctxFor(t)) }()
	pollUntil(t, "the guard to close", func() bool {
		_, err := g.Do(ctxFor(t), call("s", "after-close"), func(context.Context) (any, error) { return okValue, nil })
		return errors.Is(err, idemguard.ErrShuttingDown)
	})
	close(closing)
	a := <-done
	require.NoError(t, <-closed)
	require.ErrorIs(t, a.err, idemguard.ErrShuttingDown)
	require.Zero(t, ran.Load(), "an operation started after Close")
	require.Empty(t, h.rowsIn(t, "acme", "billed"), "the claim was not given back")
	var cnt counter
	res, err := probe.Do(ctxFor(t), c, cnt.op(okValue, nil))
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status, "never abandoned: it never ran")
	require.Equal(t, 1, cnt.n())
}

// A rolling change shortens stale_after: the replica with the new,
// shorter setting sees a healthy run of the old one in progress.
func guardRollingStaleAfterChangeNeverTakesOverAHealthyRun(t *testing.T, h *Harness) {
	old, _ := newGuard(t, h)
	rolled, _ := newGuard(t, h)
	b := newBlocker()
	defer close(b.release)
	c := call("s", "rolling")
	c.Settings.StaleAfter = time.Minute
	go func() { _, _ = old.Do(context.Background(), c, b.op) }()
	waitStarted(t, b)
	h.Age(t, "acme", "s", h.find(t, "acme", "s").KeyHash, 10*time.Second) // 10s since the last beat
	c.Settings.StaleAfter = idemguard.MinStaleAfter
	var cnt counter
	res, err := rolled.Do(ctxFor(t), c, cnt.op(okValue, nil))
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusInProgress, res.Status, "a healthy run was taken over")
	require.Zero(t, cnt.n())
	require.EqualValues(t, 1, b.runs.Load())
}

// Lookup judges a started row by the lease stored in it: an expired
// row whose owner's lease ran out is gone, whatever the reader's default.
func guardLookupJudgesStalenessByTheRowsLease(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	probe, err := g.Do(ctxFor(t), call("s", "lookup"), func(context.Context) (any, error) { return okValue, nil })
	require.NoError(t, err)
	kh := hash("lookup-lease")
	_, err = h.Store.Claim(ctxFor(t), store.ClaimParams{Tenant: "acme", Scope: "s2", KeyHash: kh,
		Fingerprint: hash("fp"), Nonce: nonce(), TTL: time.Second, Lease: time.Second})
	require.NoError(t, err)
	h.Age(t, "acme", "s2", kh, 10*time.Second) // expired, silent for 10 × its lease
	_, err = g.Lookup(ctxFor(t), testkeys.Hash(t, g, "acme", "s2", kh))
	require.ErrorIs(t, err, idemguard.ErrNotFound, "a dead, expired claim was reported as running")
	info, err := g.Lookup(ctxFor(t), testkeys.Hash(t, g, "acme", "s", probe.KeyHash))
	require.NoError(t, err)
	require.Equal(t, store.RowSucceeded, info.Status)
}

// An upstream that rejects the inputs themselves: final for those
// inputs, 422, never retried.
func guardUpstreamRejectionOfTheInputsIsFinal(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	var cnt counter
	op := cnt.op(nil, &idemguard.OpError{Reason: sanitize.InvalidInput, Err: errors.New("upstream answered 400")})
	first, err := g.Do(ctxFor(t), call("s", "rejected"), op)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusFailed, first.Status)
	require.Equal(t, sanitize.InvalidInput, first.StopReason)
	require.Equal(t, 422, first.StatusCode)
	for range 3 {
		again, err := g.Do(ctxFor(t), call("s", "rejected"), op)
		require.NoError(t, err)
		require.Equal(t, idemguard.StatusFailed, again.Status)
		require.Equal(t, sanitize.InvalidInput, again.StopReason)
		require.Equal(t, 422, again.StatusCode)
		require.True(t, again.Cached)
	}
	require.Equal(t, 1, cnt.n(), "rejected inputs were sent again")
}
