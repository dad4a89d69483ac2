package storetest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/store"
)

func nonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func hash(name string) string {
	b := make([]byte, 32)
	copy(b, name)
	return hex.EncodeToString(b)
}

func claimOne(t testing.TB, h *Harness, tenant, scope, keyHash string) (uint64, string) {
	t.Helper()
	n := nonce()
	id, err := h.Store.Claim(ctxFor(t), store.ClaimParams{Tenant: tenant, Scope: scope, KeyHash: keyHash,
		Fingerprint: hash("fp"), Nonce: n, TTL: time.Hour})
	require.NoError(t, err)
	return id, n
}

func get(t testing.TB, h *Harness, tenant, scope, keyHash string) store.Record {
	t.Helper()
	r, err := h.Store.Get(ctxFor(t), tenant, scope, keyHash)
	require.NoError(t, err)
	return r
}

func storeFreshClaimIsStarted(t *testing.T, h *Harness) {
	kh := hash("fresh")
	id, n := claimOne(t, h, "acme", "s", kh)
	r := get(t, h, "acme", "s", kh)
	require.Equal(t, id, r.ID)
	require.Equal(t, store.RowStarted, r.Status)
	require.Equal(t, 1, r.Attempts)
	require.Equal(t, n, r.ClaimNonce)
	require.Equal(t, hash("fp"), r.Fingerprint)
	require.Nil(t, r.Response)
	require.Zero(t, r.ResponseCode)
	require.True(t, r.CompletedAt.IsZero())
	require.Equal(t, r.CreatedAt, r.StartedAt)
	require.Equal(t, r.StartedAt, r.HeartbeatAt)
	require.Equal(t, r.StartedAt.Add(time.Hour), r.ExpiresAt)
	require.Equal(t, time.UTC, r.Now.Location())
	require.WithinDuration(t, r.Now, r.StartedAt, time.Minute)
	require.False(t, r.Expired())
	require.False(t, r.Stale(time.Minute))
}

func storeClaimOfExistingKeyIsDuplicate(t *testing.T, h *Harness) {
	kh := hash("dup")
	claimOne(t, h, "acme", "s", kh)
	_, err := h.Store.Claim(ctxFor(t), store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: kh,
		Fingerprint: hash("fp"), Nonce: nonce(), TTL: time.Hour})
	require.ErrorIs(t, err, store.ErrDuplicate)
	_, err = h.Store.Get(ctxFor(t), "acme", "s", hash("absent"))
	require.ErrorIs(t, err, idemguard.ErrNotFound)
}

func storeSameKeyHashInOtherTenantOrScopeIsIndependent(t *testing.T, h *Harness) {
	kh := hash("shared")
	claimOne(t, h, "acme", "s", kh)
	claimOne(t, h, "Acme", "s", kh) // tenants are case-sensitive
	claimOne(t, h, "acme", "s2", kh)
	claimOne(t, h, "globex", "s", kh)
}

func storeOfFiftyConcurrentClaimsExactlyOneWins(t *testing.T, h *Harness) {
	kh := hash("race")
	const n = 50
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, errs[i] = h.Store.Claim(ctxFor(t), store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: kh,
				Fingerprint: hash("fp"), Nonce: nonce(), TTL: time.Hour})
		})
	}
	close(start)
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
			continue
		}
		require.ErrorIs(t, err, store.ErrDuplicate)
	}
	require.Equal(t, 1, won)
}

func storeOfTwentyConcurrentStaleTakeoversExactlyOneWins(t *testing.T, h *Harness) {
	kh := hash("stale")
	claimOne(t, h, "acme", "s", kh)
	h.Age(t, "acme", "s", kh, 10*time.Minute)
	old := get(t, h, "acme", "s", kh)
	require.True(t, old.Stale(5*time.Minute))
	const n = 20
	nonces := make([]string, n)
	won := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		nonces[i] = nonce()
		wg.Go(func() {
			<-start
			won[i], errs[i] = h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimStale, ID: old.ID,
				OldNonce: old.ClaimNonce, OldAttempts: old.Attempts, NewNonce: nonces[i], StaleAfter: 5 * time.Minute})
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i := range n {
		require.NoError(t, errs[i])
		if won[i] {
			require.Equal(t, -1, winner, "two takeovers won")
			winner = i
		}
	}
	require.NotEqual(t, -1, winner, "no takeover won")
	r := get(t, h, "acme", "s", kh)
	require.Equal(t, 2, r.Attempts)
	require.Equal(t, nonces[winner], r.ClaimNonce)
	require.Equal(t, store.RowStarted, r.Status)
	require.False(t, r.Stale(5*time.Minute), "takeover must refresh heartbeat_at")
}

func storeFreshClaimCannotBeTakenOver(t *testing.T, h *Harness) {
	kh := hash("fresh-takeover")
	claimOne(t, h, "acme", "s", kh)
	old := get(t, h, "acme", "s", kh)
	won, err := h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimStale, ID: old.ID,
		OldNonce: old.ClaimNonce, OldAttempts: 1, NewNonce: nonce(), StaleAfter: 5 * time.Minute})
	require.NoError(t, err)
	require.False(t, won)
	won, err = h.Store.Abandon(ctxFor(t), store.AbandonParams{ID: old.ID, OldNonce: old.ClaimNonce,
		OldAttempts: 1, StaleAfter: 5 * time.Minute, Response: []byte(`{"ok":false}`), ResponseCode: 502, TTL: time.Hour})
	require.NoError(t, err)
	require.False(t, won)
	require.Equal(t, old.ClaimNonce, get(t, h, "acme", "s", kh).ClaimNonce)
}

func storeZombieCommitAfterTakeoverChangesNothing(t *testing.T, h *Harness) {
	kh := hash("zombie")
	id, zombie := claimOne(t, h, "acme", "s", kh)
	h.Age(t, "acme", "s", kh, 10*time.Minute)
	old := get(t, h, "acme", "s", kh)
	owner := nonce()
	won, err := h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimStale, ID: id,
		OldNonce: zombie, OldAttempts: 1, NewNonce: owner, StaleAfter: 5 * time.Minute})
	require.NoError(t, err)
	require.True(t, won)
	before := get(t, h, "acme", "s", kh)

	for _, st := range []store.RowStatus{store.RowSucceeded, store.RowFailed} {
		ok, _, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: zombie, Status: st,
			Response: []byte(`{"ok":true,"stopReason":"completed"}`), ResponseCode: 200, TTL: time.Hour})
		require.NoError(t, err)
		require.False(t, ok, "a replaced owner's commit must change nothing")
	}
	ok, err := h.Store.Heartbeat(ctxFor(t), id, zombie)
	require.NoError(t, err)
	require.False(t, ok)
	after := get(t, h, "acme", "s", kh)
	after.Now = before.Now
	require.Equal(t, before, after)
	require.NotEqual(t, old.StartedAt, after.StartedAt)

	ok, completedAt, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: owner, Status: store.RowSucceeded,
		Response: []byte(`{"ok":true,"stopReason":"completed","needsHuman":false,"cached":false}`), ResponseCode: 201, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
	done := get(t, h, "acme", "s", kh)
	require.Equal(t, done.CompletedAt, completedAt, "Complete returns the completed_at it wrote")
	require.Equal(t, store.RowSucceeded, done.Status)
	require.Equal(t, 201, done.ResponseCode)
	require.JSONEq(t, `{"ok":true,"stopReason":"completed","needsHuman":false,"cached":false}`, string(done.Response))
	require.False(t, done.CompletedAt.IsZero())
	require.Equal(t, done.CompletedAt.Add(time.Hour), done.ExpiresAt)
}

// go-sql-driver reports changed rows, not matched rows; every guarded
// update must therefore change a column, or a repeated heartbeat would
// read as a lost claim.
func storeRepeatedHeartbeatsReportOwnership(t *testing.T, h *Harness) {
	kh := hash("hb")
	id, n := claimOne(t, h, "acme", "s", kh)
	for range 5 {
		ok, err := h.Store.Heartbeat(ctxFor(t), id, n)
		require.NoError(t, err)
		require.True(t, ok)
	}
	ok, err := h.Store.Heartbeat(ctxFor(t), id, nonce())
	require.NoError(t, err)
	require.False(t, ok)
	h.Age(t, "acme", "s", kh, time.Minute)
	ok, err = h.Store.Heartbeat(ctxFor(t), id, n)
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, get(t, h, "acme", "s", kh).Stale(30*time.Second), "heartbeat must move heartbeat_at to now")
	ok, _, err = h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowFailed,
		Response: []byte(`{"ok":false,"stopReason":"provider_error"}`), ResponseCode: 502, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = h.Store.Heartbeat(ctxFor(t), id, n)
	require.NoError(t, err)
	require.False(t, ok, "a completed row has no owner to renew")
}

func storeExpiredRowIsReclaimedAsNew(t *testing.T, h *Harness) {
	kh := hash("expired")
	id, n := claimOne(t, h, "acme", "s", kh)
	ok, _, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowSucceeded,
		Response: []byte(`{"ok":true}`), ResponseCode: 200, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
	reclaim := func(r store.Record) bool {
		won, err := h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimExpired, ID: r.ID,
			OldNonce: r.ClaimNonce, OldAttempts: r.Attempts, NewNonce: nonce(), Fingerprint: hash("fp2"),
			TTL: 2 * time.Hour, StaleAfter: 5 * time.Minute})
		require.NoError(t, err)
		return won
	}
	require.False(t, reclaim(get(t, h, "acme", "s", kh)), "an unexpired row is not reclaimable")
	h.Age(t, "acme", "s", kh, 2*time.Hour)
	r := get(t, h, "acme", "s", kh)
	require.True(t, r.Expired())
	require.True(t, reclaim(r))
	r = get(t, h, "acme", "s", kh)
	require.Equal(t, store.RowStarted, r.Status)
	require.Equal(t, 1, r.Attempts)
	require.Equal(t, hash("fp2"), r.Fingerprint)
	require.Nil(t, r.Response)
	require.Zero(t, r.ResponseCode)
	require.True(t, r.CompletedAt.IsZero())
	require.Equal(t, r.StartedAt.Add(2*time.Hour), r.ExpiresAt)
}

func storeExpiredButHeartbeatingRowIsNotReclaimed(t *testing.T, h *Harness) {
	kh := hash("expired-live")
	id, n := claimOne(t, h, "acme", "s", kh)
	h.Age(t, "acme", "s", kh, 2*time.Hour) // expires_at passed
	ok, err := h.Store.Heartbeat(ctxFor(t), id, n)
	require.NoError(t, err)
	require.True(t, ok)
	r := get(t, h, "acme", "s", kh)
	require.True(t, r.Expired())
	won, err := h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimExpired, ID: r.ID,
		OldNonce: r.ClaimNonce, OldAttempts: r.Attempts, NewNonce: nonce(), Fingerprint: hash("fp"),
		TTL: time.Hour, StaleAfter: 5 * time.Minute})
	require.NoError(t, err)
	require.False(t, won, "a live owner is never displaced by expiry")
}

func storeFailedRowIsRetriedOnlyBelowMaxAttempts(t *testing.T, h *Harness) {
	kh := hash("failed")
	id, n := claimOne(t, h, "acme", "s", kh)
	for attempt := 1; ; attempt++ {
		ok, _, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowFailed,
			Response: []byte(`{"ok":false,"stopReason":"provider_error"}`), ResponseCode: 502, TTL: time.Hour})
		require.NoError(t, err)
		require.True(t, ok)
		r := get(t, h, "acme", "s", kh)
		require.Equal(t, store.RowFailed, r.Status)
		require.Equal(t, attempt, r.Attempts)
		next := nonce()
		won, err := h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimFailed, ID: id,
			OldNonce: n, OldAttempts: attempt, NewNonce: next, TTL: time.Hour, MaxAttempts: 3})
		require.NoError(t, err)
		if attempt == 3 {
			require.False(t, won, "no retry once attempt_count reaches MaxAttempts")
			return
		}
		require.True(t, won)
		r = get(t, h, "acme", "s", kh)
		require.Equal(t, store.RowStarted, r.Status)
		require.Equal(t, attempt+1, r.Attempts)
		require.Nil(t, r.Response)
		n = next
	}
}

func storeStaleRowCanBeAbandoned(t *testing.T, h *Harness) {
	kh := hash("abandon")
	id, n := claimOne(t, h, "acme", "s", kh)
	h.Age(t, "acme", "s", kh, 10*time.Minute)
	won, err := h.Store.Abandon(ctxFor(t), store.AbandonParams{ID: id, OldNonce: n, OldAttempts: 1,
		StaleAfter: 5 * time.Minute, Response: []byte(`{"ok":false,"stopReason":"abandoned"}`), ResponseCode: 502, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, won)
	r := get(t, h, "acme", "s", kh)
	require.Equal(t, store.RowFailed, r.Status)
	require.Equal(t, 502, r.ResponseCode)
	require.JSONEq(t, `{"ok":false,"stopReason":"abandoned"}`, string(r.Response))
	ok, _, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowSucceeded,
		Response: []byte(`{"ok":true}`), ResponseCode: 200, TTL: time.Hour})
	require.NoError(t, err)
	require.False(t, ok, "the silent owner cannot commit over an abandoned row")
}

func storeBrokenStoreReturnsErrors(t *testing.T, h *Harness) {
	h.Break(t)
	_, err := h.Store.Claim(ctxFor(t), store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: hash("x"),
		Fingerprint: hash("fp"), Nonce: nonce(), TTL: time.Hour})
	require.Error(t, err)
	require.False(t, errors.Is(err, store.ErrDuplicate))
	_, err = h.Store.Get(ctxFor(t), "acme", "s", hash("x"))
	require.Error(t, err)
	require.False(t, errors.Is(err, idemguard.ErrNotFound))
	require.Error(t, h.Store.Ping(ctxFor(t)))
}
