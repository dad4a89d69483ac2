package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/store"
)

// completeOne claims keyHash and stores a success for it.
func completeOne(t testing.TB, h *Harness, keyHash string) (uint64, string) {
	t.Helper()
	id, n := claimOne(t, h, "acme", "s", keyHash)
	ok, _, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowSucceeded,
		Response: []byte(`{"ok":true}`), ResponseCode: 200, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
	return id, n
}

// A reset is guarded by the row as read and finished; it changes the nonce,
// leaves the row absent to readers, writes its audit event with it, and the
// next claim re-claims the row as new (attempt 1).
func storeResetIsGuardedAndEndsTheLife(t *testing.T, h *Harness) {
	kh := hash("reset")
	id, n := claimOne(t, h, "acme", "s", kh)
	reset := func(nonce string, attempts int, audit *store.AuditEvent) bool {
		ok, err := h.Store.Reset(ctxFor(t), store.ResetParams{ID: id, OldNonce: nonce, OldAttempts: attempts, NewNonce: nonce + "r", Audit: audit})
		require.NoError(t, err)
		return ok
	}
	require.False(t, reset(n, 1, nil), "a running row is not reset")
	ok, _, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowSucceeded,
		Response: []byte(`{"ok":true}`), ResponseCode: 200, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, reset(nonce(), 1, nil), "another nonce")
	require.False(t, reset(n, 2, nil), "another attempt")
	e := auditEvent(store.AuditReset, kh)
	require.True(t, reset(n, 1, &e))
	r := get(t, h, "acme", "s", kh)
	require.Equal(t, n+"r", r.ClaimNonce)
	require.True(t, r.Expired(), "absent to readers")
	require.True(t, r.Reclaimable(time.Minute))
	require.False(t, reset(n+"r", 1, nil), "a reset row is absent: nothing to reset")
	events, err := h.Store.History(ctxFor(t), "acme", "s", []string{kh}, 100)
	require.NoError(t, err)
	require.Contains(t, kindsOf(events), store.AuditReset)

	won, err := h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimExpired, ID: id, OldNonce: n + "r",
		OldAttempts: 1, NewNonce: nonce(), Fingerprint: hash("fp2"), TTL: time.Hour, StaleAfter: time.Minute})
	require.NoError(t, err)
	require.True(t, won)
	r = get(t, h, "acme", "s", kh)
	require.Equal(t, store.RowStarted, r.Status)
	require.Equal(t, 1, r.Attempts)
}

func kindsOf(events []store.AuditEvent) []store.AuditKind {
	var kinds []store.AuditKind
	for _, e := range events {
		kinds = append(kinds, e.Kind)
	}
	return kinds
}

// A forced reclaim takes over a finished, unexpired row as read, whatever
// its attempts: of twenty concurrent ones exactly one wins.
func storeOfTwentyConcurrentForcedReclaimsExactlyOneWins(t *testing.T, h *Harness) {
	kh := hash("forced")
	id, n := claimOne(t, h, "acme", "s", kh)
	forced := func(nonce string) (bool, error) {
		return h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimForced, ID: id, OldNonce: n,
			OldAttempts: 1, NewNonce: nonce, TTL: time.Hour, MaxAttempts: 1})
	}
	won, err := forced(nonce())
	require.NoError(t, err)
	require.False(t, won, "a running row is not forced")
	ok, _, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowSucceeded,
		Response: []byte(`{"ok":true}`), ResponseCode: 200, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			won, err := forced(nonce())
			require.NoError(t, err)
			if won {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 1, wins.Load())
	r := get(t, h, "acme", "s", kh)
	require.Equal(t, store.RowStarted, r.Status)
	require.Equal(t, 2, r.Attempts, "attempt + 1, past MaxAttempts")
	require.Nil(t, r.Response)
	require.True(t, r.CompletedAt.IsZero())

	kh2 := hash("forced-expired")
	id2, n2 := completeOne(t, h, kh2)
	h.Age(t, "acme", "s", kh2, 2*time.Hour)
	won, err = h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimForced, ID: id2, OldNonce: n2,
		OldAttempts: 1, NewNonce: nonce(), TTL: time.Hour})
	require.NoError(t, err)
	require.False(t, won, "an expired row is absent: a forced call claims it as new")
}

// Over the store: a forced call replaces the answer (attempt 2, seen by a
// second process), a reset makes the next call run as attempt 1, and each
// refusal changes nothing.
func guardResetAndForcedRunsOverTheStore(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	other, _ := newGuard(t, h)
	var runs atomic.Int32
	op := func(context.Context) (any, error) {
		return map[string]any{"ok": true, "data": map[string]any{"n": runs.Add(1)}}, nil
	}
	c := call("s", map[string]any{"q": 1})
	c.Settings.AllowReset = true
	first, err := g.Do(ctxFor(t), c, op)
	require.NoError(t, err)
	afterCompletion(t, h, string(c.Tenant), c.Scope, first.KeyHash)
	forced := c
	forced.ForceNew = true
	res, err := other.Do(ctxFor(t), forced, op)
	require.NoError(t, err)
	require.True(t, res.Forced)
	require.Equal(t, 1, res.Replaced)
	require.Equal(t, 2, res.Attempt)
	replay, err := g.Do(ctxFor(t), c, op)
	require.NoError(t, err)
	require.True(t, replay.Cached)
	require.Equal(t, res.Envelope.Data, replay.Envelope.Data)

	key, err := g.KeyOfHash(c.Tenant, c.Scope, res.KeyHash)
	require.NoError(t, err)
	_, err = g.Reset(ctxFor(t), key, idemguard.Settings{})
	require.ErrorIs(t, err, store.ErrResetForbidden)
	info, err := g.Reset(ctxFor(t), key, c.Settings)
	require.NoError(t, err)
	require.Equal(t, 2, info.Attempts)
	_, err = other.Lookup(ctxFor(t), key)
	require.ErrorIs(t, err, idemguard.ErrNotFound)
	again, err := other.Do(ctxFor(t), c, op)
	require.NoError(t, err)
	require.False(t, again.Cached)
	require.Equal(t, 1, again.Attempt)
	require.EqualValues(t, 3, runs.Load())
}

// afterCompletion waits until the store's clock is past the key's stored answer by
// forcedCallSlack, so that a forced call begins after it was stored (a forced call replaces only
// such an answer).
func afterCompletion(t testing.TB, h *Harness, tenant, scope, keyHash string) {
	t.Helper()
	pollUntil(t, "the store's clock passes the stored answer", func() bool {
		r := get(t, h, tenant, scope, keyHash)
		return r.Now.Sub(r.CompletedAt) > forcedCallSlack
	})
}

// forcedCallSlack is how long before a forced call the answer it replaces is stored. The call
// takes its beginning on the store's clock as the read's clock less all the time it has taken
// so far, reply included (never later than it was): a call slower than the slack to its read
// (a loaded machine: its claim INSERT and read waiting for a core) would count an answer stored
// just before it began as stored during it, and answer as its duplicate.
const forcedCallSlack = 500 * time.Millisecond
