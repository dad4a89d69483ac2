package storetest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/internal/testkeys"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/tenancy"
)

func call(scope string, inputs any) idemguard.Call {
	return idemguard.Call{Tenant: "acme", Scope: scope, Inputs: inputs}
}

var okValue = map[string]any{"ok": true, "traceId": "tr-1", "data": map[string]any{"text": "hello", "tokens": 12}}

// blocker is an operation that runs until released.
type blocker struct {
	started chan struct{}
	release chan struct{}
	runs    atomic.Int32
	cause   atomic.Value // context.Cause when the op saw its context end
}

func newBlocker() *blocker {
	return &blocker{started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (b *blocker) op(ctx context.Context) (any, error) {
	b.runs.Add(1)
	b.started <- struct{}{}
	select {
	case <-b.release:
		return okValue, nil
	case <-ctx.Done():
		b.cause.Store(context.Cause(ctx))
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		return nil, errors.New("blocker never released")
	}
}

func waitStarted(t testing.TB, b *blocker) {
	t.Helper()
	select {
	case <-b.started:
	case <-time.After(20 * time.Second):
		t.Fatal("operation did not start")
	}
}

// doStarted runs g.Do(c, b.op) in its own goroutine and returns once the
// operation has started; the channel gets its result. An error fails this
// case only (t.Error, never a panic), and the result is still sent so the
// case ends.
func doStarted(t testing.TB, g *idemguard.Guard, c idemguard.Call, b *blocker) <-chan idemguard.Result {
	t.Helper()
	done := doAsync(t, g, c, b)
	waitStarted(t, b)
	return done
}

// doAsync is doStarted without waiting for the operation: for a duplicate
// that is to wait on a running first call.
func doAsync(t testing.TB, g *idemguard.Guard, c idemguard.Call, b *blocker) <-chan idemguard.Result {
	done := make(chan idemguard.Result, 1)
	go func() {
		res, err := g.Do(context.Background(), c, b.op)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	return done
}

// releaseToWaiter lets the blocked first call finish and requires the
// duplicate that waited on it to get its answer as a replay of the one run.
func releaseToWaiter(t testing.TB, b *blocker, firstDone, waited <-chan idemguard.Result) {
	t.Helper()
	close(b.release)
	first := <-firstDone
	w := <-waited
	require.Equal(t, idemguard.StatusSucceeded, w.Status)
	require.True(t, w.Cached)
	sameExceptCached(t, first.Body, w.Body)
	require.EqualValues(t, 1, b.runs.Load())
}

func pollUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func guardFirstCallRunsThenReplaysByteForByte(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	other, _ := newGuard(t, h) // a second process: no shared memory
	var c counter
	op := c.op(idemguard.Response{StatusCode: 201, Value: okValue}, nil)
	first, err := g.Do(ctxFor(t), call("s", map[string]any{"q": 1}), op)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, first.Status)
	require.False(t, first.Cached)
	require.Equal(t, 201, first.StatusCode)
	require.Equal(t, 1, first.Attempt)
	require.Equal(t, sanitize.Completed, first.StopReason)
	require.JSONEq(t, `{"ok":true,"stopReason":"completed","traceId":"tr-1","needsHuman":false,"cached":false,"data":{"text":"hello","tokens":12}}`, string(first.Body))

	for _, gg := range []*idemguard.Guard{g, other, g, other} {
		again, err := gg.Do(ctxFor(t), call("s", map[string]any{"q": 1}), op)
		require.NoError(t, err)
		require.Equal(t, idemguard.StatusSucceeded, again.Status)
		require.True(t, again.Cached)
		require.True(t, again.Envelope.Cached)
		require.Equal(t, 201, again.StatusCode)
		require.Equal(t, 1, again.Attempt)
		require.Equal(t, first.KeyHash, again.KeyHash)
		require.False(t, again.CompletedAt.IsZero())
		sameExceptCached(t, first.Body, again.Body)
	}
	require.Equal(t, 1, c.n())
}

func guardBusinessFailureIsASuccessAndReplayed(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	var c counter
	op := c.op(map[string]any{"ok": false, "stopReason": "needs_human", "needsHuman": true}, nil)
	first, err := g.Do(ctxFor(t), call("s", "x"), op)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, first.Status)
	require.Equal(t, sanitize.NeedsHuman, first.StopReason)
	requireReplay(t, g, call("s", "x"), op, first)
	require.Equal(t, 1, c.n())
}

func guardBlockedFieldsAreNeverStoredOrReplayed(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h, withoutCache())
	var c counter
	op := c.op(map[string]any{"ok": true, "debug": "canary-debug", "model": "canary-model", "prompt": "canary-prompt",
		"data": map[string]any{"Prompt": "canary-Prompt", "text": "t", "nested": map[string]any{"a": "canary-nested"}, "requestId": "canary-rid"}}, nil)
	first, err := g.Do(ctxFor(t), call("s", 1), op)
	require.NoError(t, err)
	again, err := g.Do(ctxFor(t), call("s", 1), op)
	require.NoError(t, err)
	for _, b := range [][]byte{first.Body, again.Body} {
		for _, bad := range []string{`"debug"`, `"model"`, `"prompt"`, `"Prompt"`, `"nested"`, `"requestId"`, "canary"} {
			require.NotContains(t, string(b), bad)
		}
	}
	require.NotContains(t, h.Dump(t), "canary", "no dropped value reaches the table")
	require.Contains(t, string(again.Body), `"text":"t"`)
	// The row names what was dropped (names only), so the loss is visible.
	dropped := []string{"debug", "model", "prompt", "data.Prompt", "data.nested", "data.requestId"}
	require.ElementsMatch(t, dropped, first.DroppedFields)
	require.ElementsMatch(t, dropped, again.DroppedFields)
	info, err := g.Lookup(ctxFor(t), testkeys.Hash(t, g, "acme", "s", first.KeyHash))
	require.NoError(t, err)
	require.ElementsMatch(t, dropped, info.DroppedFields)
}

func guardOversizeDataIsDroppedAndReplayedTheSame(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h, withoutCache())
	var c counter
	op := c.op(map[string]any{"ok": true, "traceId": "big", "data": map[string]any{"text": strings.Repeat("x", 70<<10)}}, nil)
	first, err := g.Do(ctxFor(t), call("s", 1), op)
	require.NoError(t, err)
	require.LessOrEqual(t, len(first.Body), sanitize.DefaultMaxBytes)
	require.Nil(t, first.Envelope.Data)
	require.Equal(t, "big", first.Envelope.TraceID)
	again, err := g.Do(ctxFor(t), call("s", 1), op)
	require.NoError(t, err)
	sameExceptCached(t, first.Body, again.Body)
}

func guardDuplicateWhileRunningIsInProgressOrWaits(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	b := newBlocker()
	firstDone := doStarted(t, g, call("s", "slow"), b)
	dup, err := g.Do(ctxFor(t), call("s", "slow"), b.op)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusInProgress, dup.Status)
	require.Equal(t, 409, dup.StatusCode)
	require.Equal(t, sanitize.InProgress, dup.StopReason)
	require.False(t, dup.Envelope.OK)

	c := call("s", "slow")
	c.Wait = 20 * time.Second
	waited := doAsync(t, g, c, b)
	time.Sleep(50 * time.Millisecond) // let the waiter start polling; correctness does not depend on it
	releaseToWaiter(t, b, firstDone, waited)
}

func guardBoundedWaitGivesUpWithInProgress(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	b := newBlocker()
	defer close(b.release)
	go func() { _, _ = g.Do(context.Background(), call("s", "slow"), b.op) }()
	waitStarted(t, b)
	c := call("s", "slow")
	c.Wait = 150 * time.Millisecond
	start := time.Now()
	res, err := g.Do(ctxFor(t), c, b.op)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusInProgress, res.Status)
	require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
}

func guardTwoHundredConcurrentCallersRunTheOperationOnce(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	other, _ := newGuard(t, h)
	var runs atomic.Int32
	op := func(context.Context) (any, error) {
		runs.Add(1)
		time.Sleep(300 * time.Millisecond) // the slow model call
		return okValue, nil
	}
	const n = 200
	results := make([]idemguard.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		gg := g
		if i%2 == 1 {
			gg = other
		}
		wg.Go(func() {
			<-start
			results[i], errs[i] = gg.Do(ctxFor(t), call("s", map[string]any{"same": true}), op)
		})
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, 1, runs.Load())
	fresh := 0
	for i := range n {
		require.NoError(t, errs[i])
		switch results[i].Status {
		case idemguard.StatusSucceeded:
			if !results[i].Cached {
				fresh++
			}
		case idemguard.StatusInProgress:
		default:
			t.Fatalf("caller %d got %s", i, results[i].Status)
		}
	}
	require.Equal(t, 1, fresh)
}

func guardTwentyCallersOnAStaleRowTakeItOverOnce(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	// A crashed owner: a started row nobody heartbeats.
	crashed := newBlocker()
	go func() { _, _ = g.Do(context.Background(), call("s", "crash"), crashed.op) }()
	waitStarted(t, crashed)
	res, err := g.Do(ctxFor(t), call("s", "crash"), crashed.op)
	require.NoError(t, err)
	h2, _ := newGuard(t, h)
	kh := res.KeyHash
	// Stop the first owner's heartbeat from mattering: age the row far past staleAfter.
	h.Age(t, "acme", "s", kh, time.Hour)

	var runs atomic.Int32
	op := func(context.Context) (any, error) { runs.Add(1); return okValue, nil }
	const n = 20
	results := make([]idemguard.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := h2.Do(ctxFor(t), call("s", "crash"), op)
			if err == nil {
				results[i] = r
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 1, runs.Load())
	ran := 0
	for _, r := range results {
		require.Contains(t, []idemguard.Status{idemguard.StatusSucceeded, idemguard.StatusInProgress}, r.Status)
		if r.Status == idemguard.StatusSucceeded && !r.Cached {
			ran++
			require.Equal(t, 2, r.Attempt)
		}
	}
	require.Equal(t, 1, ran)
	close(crashed.release) // the old owner finishes late; its commit must not land (see Zombie case)
}

func guardZombieOwnerNeverOverwritesTheNewOwner(t *testing.T, h *Harness) {
	// The zombie heartbeats too rarely to notice the takeover.
	zombieGuard, _ := newGuard(t, h, withHeartbeat(time.Hour), withoutCache())
	owner, _ := newGuard(t, h, withoutCache())
	zombie := newBlocker()
	zombieDone := make(chan idemguard.Result, 1)
	go func() {
		r, _ := zombieGuard.Do(context.Background(), call("s", "z"), zombie.op)
		zombieDone <- r
	}()
	waitStarted(t, zombie)
	probe, err := owner.Do(ctxFor(t), call("s", "z"), zombie.op)
	require.NoError(t, err)
	h.Age(t, "acme", "s", probe.KeyHash, time.Hour)
	ownerValue := map[string]any{"ok": true, "traceId": "new-owner"}
	taken, err := owner.Do(ctxFor(t), call("s", "z"), func(context.Context) (any, error) { return ownerValue, nil })
	require.NoError(t, err)
	require.False(t, taken.Cached)
	require.Equal(t, 2, taken.Attempt)

	close(zombie.release)
	z := <-zombieDone
	require.True(t, z.LostClaim)
	require.Equal(t, "tr-1", z.Envelope.TraceID, "the zombie's own caller still gets its answer")

	replay, err := owner.Do(ctxFor(t), call("s", "z"), zombie.op)
	require.NoError(t, err)
	require.Equal(t, "new-owner", replay.Envelope.TraceID)
	sameExceptCached(t, taken.Body, replay.Body)
}

func guardFailedIsRetriedUntilMaxAttemptsThenRetryLimit(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	var c counter
	op := c.op(nil, &idemguard.OpError{Reason: sanitize.RateLimited, Err: errors.New("429 from upstream")})
	for attempt := 1; attempt <= 3; attempt++ {
		res, err := g.Do(ctxFor(t), call("s", "f"), op)
		require.NoError(t, err)
		require.Equal(t, idemguard.StatusFailed, res.Status)
		require.Equal(t, sanitize.RateLimited, res.StopReason)
		require.Equal(t, attempt, res.Attempt)
		require.Equal(t, 502, res.StatusCode)
		require.Error(t, res.Err)
		require.False(t, res.Cached)
	}
	require.Equal(t, 3, c.n())
	res, err := g.Do(ctxFor(t), call("s", "f"), op)
	require.NoError(t, err)
	require.Equal(t, 3, c.n(), "no fourth execution")
	require.Equal(t, idemguard.StatusFailed, res.Status)
	require.Equal(t, sanitize.RetryLimit, res.StopReason)
	require.True(t, res.Cached)
	require.Equal(t, 3, res.Attempt)
	require.JSONEq(t, `{"ok":false,"stopReason":"retry_limit","needsHuman":false,"cached":true}`, string(res.Body))
}

func guardFailureThenSuccessOnRetry(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	fail := true
	op := func(context.Context) (any, error) {
		if fail {
			return nil, errors.New("upstream 500")
		}
		return okValue, nil
	}
	res, err := g.Do(ctxFor(t), call("s", "r"), op)
	require.NoError(t, err)
	require.Equal(t, sanitize.ProviderError, res.StopReason)
	fail = false
	res, err = g.Do(ctxFor(t), call("s", "r"), op)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.Equal(t, 2, res.Attempt)
	require.False(t, res.Cached)
}

func guardPanicIsRecoveredAndRecordedAsFailure(t *testing.T, h *Harness) {
	g, logs := newGuard(t, h)
	res, err := g.Do(ctxFor(t), call("s", "p"), func(context.Context) (any, error) {
		panic("secret-panic-value")
	})
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusFailed, res.Status)
	require.Equal(t, sanitize.Unknown, res.StopReason)
	var pe *idemguard.PanicError
	require.ErrorAs(t, res.Err, &pe)
	require.Contains(t, logs.String(), "operation panicked")
	require.NotContains(t, logs.String(), "secret-panic-value")
	res, err = g.Do(ctxFor(t), call("s", "p"), func(context.Context) (any, error) { return okValue, nil })
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status, "a panicked attempt is retryable")
}

func guardTimeoutFailsWithStopReasonTimeout(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	c := call("s", "t")
	c.Timeout = 50 * time.Millisecond
	res, err := g.Do(ctxFor(t), c, func(ctx context.Context) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusFailed, res.Status)
	require.Equal(t, sanitize.Timeout, res.StopReason)
}

func guardExpiredKeyIsClaimableAgain(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h, withoutCache())
	var c counter
	op := c.op(okValue, nil)
	c1 := call("s", "e")
	c1.Settings.TTL = time.Minute
	first, err := g.Do(ctxFor(t), c1, op)
	require.NoError(t, err)
	h.Age(t, "acme", "s", first.KeyHash, 2*time.Minute)
	again, err := g.Do(ctxFor(t), c1, op)
	require.NoError(t, err)
	require.False(t, again.Cached)
	require.Equal(t, 1, again.Attempt)
	require.Equal(t, 2, c.n())
	_, err = g.Lookup(ctxFor(t), testkeys.Client(t, g, "acme", "s", "never-used"))
	require.ErrorIs(t, err, idemguard.ErrNotFound)
}

func guardSameClientKeyWithOtherInputsIsAMismatch(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	fresh, _ := newGuard(t, h) // no cache: must detect it from the row
	var c counter
	c1 := idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: "order-1", Inputs: map[string]any{"q": 1}}
	_, err := g.Do(ctxFor(t), c1, c.op(okValue, nil))
	require.NoError(t, err)
	c2 := c1
	c2.Inputs = map[string]any{"q": 2}
	for _, gg := range []*idemguard.Guard{g, fresh} {
		_, err = gg.Do(ctxFor(t), c2, c.op(okValue, nil))
		require.ErrorIs(t, err, idemguard.ErrFingerprintMismatch)
	}
	require.Equal(t, 1, c.n())
	// Key order and white space are not "other inputs".
	c3 := c1
	c3.Inputs = []byte(` { "q" : 1 } `)
	res, err := fresh.Do(ctxFor(t), c3, c.op(okValue, nil))
	require.NoError(t, err)
	require.True(t, res.Cached)
	info, err := fresh.Lookup(ctxFor(t), testkeys.Client(t, fresh, "acme", "s", "order-1"))
	require.NoError(t, err)
	require.Equal(t, store.RowSucceeded, info.Status)
	require.Equal(t, 1, info.Attempts)
}

func guardTenantsAndScopesAreIndependent(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	var c counter
	for _, tc := range []struct {
		tenant tenancy.ID
		scope  string
	}{{"acme", "s"}, {"globex", "s"}, {"acme", "s2"}, {"Acme", "s"}} {
		res, err := g.Do(ctxFor(t), idemguard.Call{Tenant: tc.tenant, Scope: tc.scope, ClientKey: "k-1",
			Inputs: "same"}, c.op(okValue, nil))
		require.NoError(t, err)
		require.False(t, res.Cached, "%s/%s", tc.tenant, tc.scope)
	}
	require.Equal(t, 4, c.n())
	_, err := g.Lookup(ctxFor(t), testkeys.Client(t, g, "initech", "s", "k-1"))
	require.ErrorIs(t, err, idemguard.ErrNotFound)
}

func guardPolicyFailMarksAStaleRowAbandoned(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h, withoutCache())
	crashed := newBlocker()
	defer close(crashed.release)
	c := call("billed", "once")
	c.Settings.StalePolicy = idemguard.StaleFail
	go func() { _, _ = g.Do(context.Background(), c, crashed.op) }()
	waitStarted(t, crashed)
	probe, err := g.Do(ctxFor(t), c, crashed.op)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusInProgress, probe.Status)
	h.Age(t, "acme", "billed", probe.KeyHash, time.Hour)
	var cnt counter
	for range 2 {
		res, err := g.Do(ctxFor(t), c, cnt.op(okValue, nil))
		require.NoError(t, err)
		require.Equal(t, idemguard.StatusFailed, res.Status)
		require.Equal(t, sanitize.Abandoned, res.StopReason)
		require.Equal(t, 1, res.Attempt)
	}
	require.Zero(t, cnt.n(), "an abandoned operation never runs again")
	info, err := g.Lookup(ctxFor(t), testkeys.Hash(t, g, "acme", "billed", probe.KeyHash))
	require.NoError(t, err)
	require.Equal(t, store.RowFailed, info.Status)
}

func guardHeartbeatingLongOperationIsNeverTakenOver(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	other, _ := newGuard(t, h)
	// Beats every 667 ms against a 2 s lease: a busy machine's scheduling
	// delays (a 1 s lease once lapsed at load 14) stay well inside it.
	const staleAfter = 2 * time.Second
	c := call("long", "op")
	c.Settings.StaleAfter = staleAfter
	var runs atomic.Int32
	done := make(chan idemguard.Result, 1)
	go func() {
		r, _ := g.Do(context.Background(), c, func(ctx context.Context) (any, error) {
			runs.Add(1)
			select {
			case <-time.After(3 * staleAfter):
				return okValue, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})
		done <- r
	}()
	pollUntil(t, "the operation to start", func() bool { return runs.Load() == 1 })
	for {
		select {
		case r := <-done:
			require.Equal(t, idemguard.StatusSucceeded, r.Status)
			require.False(t, r.LostClaim)
			require.Equal(t, 1, r.Attempt)
			require.EqualValues(t, 1, runs.Load())
			return
		default:
		}
		res, err := other.Do(ctxFor(t), c, func(context.Context) (any, error) {
			runs.Add(1)
			return okValue, nil
		})
		require.NoError(t, err)
		require.Contains(t, []idemguard.Status{idemguard.StatusInProgress, idemguard.StatusSucceeded}, res.Status)
		require.EqualValues(t, 1, runs.Load(), "a heartbeating operation was taken over")
		time.Sleep(50 * time.Millisecond)
	}
}

func guardLostHeartbeatCancelsTheOperation(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h, withHeartbeat(20*time.Millisecond))
	b := newBlocker()
	done := make(chan idemguard.Result, 1)
	go func() {
		r, _ := g.Do(context.Background(), call("s", "hb"), b.op)
		done <- r
	}()
	waitStarted(t, b)
	// A heartbeat (every 20ms) may land between the aging and the takeover
	// on a busy machine: age the row again until the takeover wins.
	pollUntil(t, "a takeover", func() bool {
		rec := h.find(t, "acme", "s")
		h.Age(t, "acme", "s", rec.KeyHash, time.Hour)
		rec = h.find(t, "acme", "s")
		won, err := h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimStale, ID: rec.ID,
			OldNonce: rec.ClaimNonce, OldAttempts: rec.Attempts, NewNonce: nonce(), StaleAfter: idemguard.DefaultStaleAfter})
		require.NoError(t, err)
		return won
	})
	var r idemguard.Result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the operation was not cancelled after losing its claim")
	}
	require.ErrorIs(t, b.cause.Load().(error), idemguard.ErrOwnershipLost)
	require.True(t, r.LostClaim)
	after := h.find(t, "acme", "s")
	require.Equal(t, store.RowStarted, after.Status, "the loser wrote nothing")
	require.Equal(t, 2, after.Attempts)
}

func guardNoRawKeyTextOrSecretInTableOrLogs(t *testing.T, h *Harness) {
	secret := []byte("CANARY-SECRET-7f3a9c-0123456789abcdef")
	g, logs := newGuard(t, h, withSecret(secret))
	canaries := []string{"CANARY-SECRET-7f3a9c", "CANARY-KEY-51c2", "CANARY-USER-TEXT", "CANARY-INPUT", "CANARY-PROMPT", "CANARY-DEBUG"}
	inputs := map[string]any{"text_sha256": keys.HashUserText("CANARY-USER-TEXT please"), "other": "CANARY-INPUT"}
	c := idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: "CANARY-KEY-51c2", Inputs: inputs}
	value := map[string]any{"ok": true, "debug": "CANARY-DEBUG", "data": map[string]any{"prompt": "CANARY-PROMPT", "n": 1}}
	_, err := g.Do(ctxFor(t), c, func(context.Context) (any, error) { return value, nil })
	require.NoError(t, err)
	// Exercise the logging paths too: a failure, a mismatch, a takeover.
	c2 := idemguard.Call{Tenant: "acme", Scope: "s2", ClientKey: "CANARY-KEY-51c2", Inputs: inputs}
	_, err = g.Do(ctxFor(t), c2, func(context.Context) (any, error) {
		return nil, errors.New("upstream said CANARY-PROMPT")
	})
	require.NoError(t, err)
	c3 := c
	c3.Inputs = "CANARY-INPUT-2"
	_, err = g.Do(ctxFor(t), c3, func(context.Context) (any, error) { return value, nil })
	require.ErrorIs(t, err, idemguard.ErrFingerprintMismatch)

	dump := h.Dump(t)
	require.NotEmpty(t, dump)
	for _, canary := range canaries {
		require.NotContains(t, dump, canary, "table")
		require.NotContains(t, logs.String(), canary, "logs")
	}
	require.NotEmpty(t, logs.String(), "the failure must have been logged")
}

func guardStoreDownMeansTheOperationDoesNotRun(t *testing.T, h *Harness) {
	var events []idemguard.Event
	var mu sync.Mutex
	g, _ := newGuard(t, h, withObserver(func(e idemguard.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }))
	h.Break(t)
	var c counter
	_, err := g.Do(ctxFor(t), call("s", "down"), c.op(okValue, nil))
	require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
	var se *idemguard.StoreError
	require.ErrorAs(t, err, &se)
	require.Zero(t, c.n())
	require.ErrorIs(t, g.Ping(ctxFor(t)), idemguard.ErrStoreUnavailable)
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, events, idemguard.Event{Kind: idemguard.EventStoreError, Scope: "s", StoreOp: "claim"})
}

func guardInvalidInputChangesNothing(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	var c counter
	op := c.op(okValue, nil)
	for name, bad := range map[string]idemguard.Call{
		"tenant":    {Tenant: "a b", Scope: "s", Inputs: 1},
		"no tenant": {Scope: "s", Inputs: 1},
		"scope":     {Tenant: "acme", Scope: "s/1", Inputs: 1},
		"key":       {Tenant: "acme", Scope: "s", ClientKey: "has space", Inputs: 1},
		"long key":  {Tenant: "acme", Scope: "s", ClientKey: strings.Repeat("k", 256), Inputs: 1},
		"inputs":    {Tenant: "acme", Scope: "s", Inputs: []byte(`{"a":`)},
		"ttl":       {Tenant: "acme", Scope: "s", Inputs: 1, Settings: idemguard.Settings{TTL: 8 * 24 * time.Hour}},
		"policy":    {Tenant: "acme", Scope: "s", Inputs: 1, Settings: idemguard.Settings{StalePolicy: "maybe"}},
	} {
		_, err := g.Do(ctxFor(t), bad, op)
		require.ErrorIs(t, err, idemguard.ErrInvalidInput, name)
	}
	_, err := g.Do(ctxFor(t), call("s", 1), nil)
	require.ErrorIs(t, err, idemguard.ErrInvalidInput)
	require.Zero(t, c.n())
	require.Empty(t, strings.TrimSpace(h.Dump(t)))
}

// find returns the only row in (tenant, scope).
func (h *Harness) find(t testing.TB, tenant, scope string) store.Record {
	t.Helper()
	var out store.Record
	pollUntil(t, "the row", func() bool {
		for _, line := range strings.Split(h.Dump(t), "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == tenant && f[1] == scope {
				r, err := h.Store.Get(ctxFor(t), tenant, scope, f[2])
				if err == nil {
					out = r
					return true
				}
			}
		}
		return false
	})
	return out
}
