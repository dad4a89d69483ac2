package storetest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// auditSeq spaces the events of one case a second apart.
var auditSeq atomic.Int64

// auditEvent returns an event about (acme, s, kh) with a fresh id, at a
// time with nanoseconds in a zone other than UTC (stores keep UTC
// microseconds).
func auditEvent(kind store.AuditKind, kh string) store.AuditEvent {
	at := time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.FixedZone("UTC+2", 2*3600)).Add(time.Duration(auditSeq.Add(1)) * time.Second)
	return store.AuditEvent{ID: nonce(), Kind: kind, At: at, Tenant: "acme", Scope: "s", KeyHash: kh, Attempt: 1}
}

// stored is e as a store gives it back: times in UTC, to the microsecond.
func stored(e store.AuditEvent) store.AuditEvent {
	e.At = e.At.UTC().Truncate(time.Microsecond)
	if !e.OriginalAt.IsZero() {
		e.OriginalAt = e.OriginalAt.UTC().Truncate(time.Microsecond)
	}
	return e
}

func storedAll(events ...store.AuditEvent) []store.AuditEvent {
	out := make([]store.AuditEvent, len(events))
	for i, e := range events {
		out[i] = stored(e)
	}
	return out
}

// history is (acme, s)'s trail for the key hashes, as many as there are.
func history(t testing.TB, h *Harness, keyHashes ...string) []store.AuditEvent {
	t.Helper()
	events, err := h.Store.History(ctxFor(t), "acme", "s", keyHashes, 1000)
	require.NoError(t, err)
	return events
}

// Removing the duplicate check before the event, or writing the event
// outside the claim, leaves an event for a claim that never happened.
func auditClaimWritesItsEventOnlyWhenItWins(t *testing.T, h *Harness) {
	kh := hash("audit-claim")
	won := auditEvent(store.AuditClaimed, kh)
	won.Actor = "h:0123456789abcdef"
	id, err := h.Store.Claim(ctxFor(t), store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: kh,
		Fingerprint: hash("fp"), Nonce: nonce(), TTL: time.Hour, Audit: &won})
	require.NoError(t, err)
	require.NotZero(t, id)
	require.Equal(t, storedAll(won), history(t, h, kh))

	lost := auditEvent(store.AuditClaimed, kh)
	_, err = h.Store.Claim(ctxFor(t), store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: kh,
		Fingerprint: hash("fp"), Nonce: nonce(), TTL: time.Hour, Audit: &lost})
	require.ErrorIs(t, err, store.ErrDuplicate)
	require.Equal(t, storedAll(won), history(t, h, kh), "a duplicate claim writes no event")

	// A claim without an event writes none.
	other := hash("audit-claim-plain")
	claimOne(t, h, "acme", "s", other)
	require.Empty(t, history(t, h, other))
}

// Each kind of reclaim: a losing one (wrong nonce, or its condition not
// met) writes nothing, the winning one exactly its event.
func auditReclaimsWriteTheirEventOnlyWhenTheyWin(t *testing.T, h *Harness) {
	reclaim := func(p store.ReclaimParams, e store.AuditEvent) bool {
		t.Helper()
		p.Audit = &e
		won, err := h.Store.Reclaim(ctxFor(t), p)
		require.NoError(t, err)
		return won
	}

	// Expired.
	kh := hash("audit-expired")
	id, n := claimOne(t, h, "acme", "s", kh)
	ok, _, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowSucceeded,
		Response: []byte(`{"ok":true}`), ResponseCode: 200, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
	expired := store.ReclaimParams{Kind: store.ReclaimExpired, ID: id, OldNonce: n, OldAttempts: 1,
		NewNonce: nonce(), Fingerprint: hash("fp2"), TTL: time.Hour, StaleAfter: 5 * time.Minute}
	require.False(t, reclaim(expired, auditEvent(store.AuditExpiredReclaim, kh)), "not expired yet")
	h.Age(t, "acme", "s", kh, 2*time.Hour)
	wrong := expired
	wrong.OldNonce = nonce()
	require.False(t, reclaim(wrong, auditEvent(store.AuditExpiredReclaim, kh)), "another nonce")
	require.Empty(t, history(t, h, kh))
	e1 := auditEvent(store.AuditExpiredReclaim, kh)
	require.True(t, reclaim(expired, e1))
	require.Equal(t, storedAll(e1), history(t, h, kh))

	// Stale.
	kh = hash("audit-stale")
	id, n = claimOne(t, h, "acme", "s", kh)
	stale := store.ReclaimParams{Kind: store.ReclaimStale, ID: id, OldNonce: n, OldAttempts: 1,
		NewNonce: nonce(), StaleAfter: 5 * time.Minute}
	require.False(t, reclaim(stale, auditEvent(store.AuditTakeover, kh)), "a fresh claim")
	h.Age(t, "acme", "s", kh, 10*time.Minute)
	wrong = stale
	wrong.OldAttempts = 2
	require.False(t, reclaim(wrong, auditEvent(store.AuditTakeover, kh)), "another attempt")
	require.Empty(t, history(t, h, kh))
	e2 := auditEvent(store.AuditTakeover, kh)
	e2.Attempt = 2
	require.True(t, reclaim(stale, e2))
	require.False(t, reclaim(stale, auditEvent(store.AuditTakeover, kh)), "the same takeover twice")
	require.Equal(t, storedAll(e2), history(t, h, kh))

	// Failed.
	kh = hash("audit-failed")
	id, n = claimOne(t, h, "acme", "s", kh)
	ok, _, err = h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowFailed,
		Response: []byte(`{"ok":false}`), ResponseCode: 502, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
	failed := store.ReclaimParams{Kind: store.ReclaimFailed, ID: id, OldNonce: n, OldAttempts: 1,
		NewNonce: nonce(), TTL: time.Hour, MaxAttempts: 1}
	require.False(t, reclaim(failed, auditEvent(store.AuditRetried, kh)), "at MaxAttempts")
	failed.MaxAttempts = 3
	e3 := auditEvent(store.AuditRetried, kh)
	e3.Attempt = 2
	require.True(t, reclaim(failed, e3))
	require.Equal(t, storedAll(e3), history(t, h, kh))
}

func auditAbandonReleaseAndCancel(t *testing.T, h *Harness) {
	// Abandon: not while fresh, not with another nonce; then its event,
	// stop reason included.
	kh := hash("audit-abandon")
	id, n := claimOne(t, h, "acme", "s", kh)
	abandon := func(nonce string, e store.AuditEvent) bool {
		t.Helper()
		won, err := h.Store.Abandon(ctxFor(t), store.AbandonParams{ID: id, OldNonce: nonce, OldAttempts: 1,
			StaleAfter: 5 * time.Minute, Response: []byte(`{"ok":false}`), ResponseCode: 502, TTL: time.Hour, Audit: &e})
		require.NoError(t, err)
		return won
	}
	require.False(t, abandon(n, auditEvent(store.AuditAbandoned, kh)), "a fresh claim")
	h.Age(t, "acme", "s", kh, 10*time.Minute)
	require.False(t, abandon(nonce(), auditEvent(store.AuditAbandoned, kh)), "another nonce")
	e1 := auditEvent(store.AuditAbandoned, kh)
	e1.StopReason = sanitize.StopReason("abandoned")
	require.True(t, abandon(n, e1))
	require.Equal(t, storedAll(e1), history(t, h, kh))

	// Release of a fresh claim (the row goes) and of a retry (the row is
	// restored): another nonce releases nothing and writes nothing.
	kh = hash("audit-release")
	id, n = claimOne(t, h, "acme", "s", kh)
	release := func(p store.ReleaseParams, e store.AuditEvent) bool {
		t.Helper()
		p.Audit = &e
		won, err := h.Store.Release(ctxFor(t), p)
		require.NoError(t, err)
		return won
	}
	require.False(t, release(store.ReleaseParams{ID: id, Nonce: nonce()}, auditEvent(store.AuditReleased, kh)))
	e2 := auditEvent(store.AuditReleased, kh)
	require.True(t, release(store.ReleaseParams{ID: id, Nonce: n}, e2))
	require.Equal(t, storedAll(e2), history(t, h, kh), "the event outlives the row it describes")
	_, err := h.Store.Get(ctxFor(t), "acme", "s", kh)
	require.ErrorIs(t, err, idemguard.ErrNotFound)

	id, n = claimOne(t, h, "acme", "s", kh)
	ok, _, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowFailed,
		Response: []byte(`{"ok":false}`), ResponseCode: 502, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
	prev := get(t, h, "acme", "s", kh)
	retry := nonce()
	won, err := h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimFailed, ID: id, OldNonce: n,
		OldAttempts: 1, NewNonce: retry, TTL: time.Hour, MaxAttempts: 3})
	require.NoError(t, err)
	require.True(t, won)
	require.False(t, release(store.ReleaseParams{ID: id, Nonce: n, Prev: &prev}, auditEvent(store.AuditReleased, kh)),
		"the failed attempt's nonce no longer owns the row")
	e3 := auditEvent(store.AuditReleased, kh)
	require.True(t, release(store.ReleaseParams{ID: id, Nonce: retry, Prev: &prev}, e3))
	require.Equal(t, storedAll(e2, e3), history(t, h, kh))

	// RequestCancel: not another execution's, not a finished row's.
	kh = hash("audit-cancel")
	id, n = claimOne(t, h, "acme", "s", kh)
	cancel := func(nonce string, e store.AuditEvent) bool {
		t.Helper()
		won, err := h.Store.RequestCancel(ctxFor(t), store.CancelParams{ID: id, Nonce: nonce, Audit: &e})
		require.NoError(t, err)
		return won
	}
	require.False(t, cancel(nonce(), auditEvent(store.AuditCanceled, kh)))
	e4 := auditEvent(store.AuditCanceled, kh)
	e4.Actor = "ops@example.com"
	require.True(t, cancel(n, e4))
	ok, _, err = h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowSucceeded,
		Response: []byte(`{"ok":true}`), ResponseCode: 200, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
	require.False(t, cancel(n, auditEvent(store.AuditCanceled, kh)), "a finished row")
	require.Equal(t, storedAll(e4), history(t, h, kh))
}

// A batch retried after an unknown outcome writes nothing twice: an id
// already stored is skipped, its first version kept, and the rest of the
// batch written.
func auditAppendSkipsARepeatedID(t *testing.T, h *Harness) {
	kh := hash("audit-append")
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), nil))
	a, b, c := auditEvent(store.AuditReplay, kh), auditEvent(store.AuditInProgress, kh), auditEvent(store.AuditConflict, kh)
	a.OriginalAt = a.At.Add(-time.Minute)
	b.Detail = store.InProgressWaited
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{a, b}))
	again := b
	again.Kind, again.Detail = store.AuditConflict, ""
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{again, c}))
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{a, b, c}))
	require.Equal(t, storedAll(a, b, c), history(t, h, kh))

	// An id twice in one batch: the first is kept.
	d := auditEvent(store.AuditReplay, kh)
	dAgain := d
	dAgain.Attempt = 9
	e := auditEvent(store.AuditReplay, kh)
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{d, dAgain, e, d}))
	require.Equal(t, storedAll(a, b, c, d, e), history(t, h, kh))

	// A durable event already stored (its batch copy, say) does not make
	// the audited write fail: the row changes, the event stays one.
	claim := auditEvent(store.AuditClaimed, hash("audit-append-claim"))
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{claim}))
	_, err := h.Store.Claim(ctxFor(t), store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: claim.KeyHash,
		Fingerprint: hash("fp"), Nonce: nonce(), TTL: time.Hour, Audit: &claim})
	require.NoError(t, err)
	require.Equal(t, storedAll(claim), history(t, h, claim.KeyHash))
}

// History: only (tenant, scope)'s events of the given hashes (tenants and
// scopes are byte-exact), oldest first, a tie in At broken by ID, at most
// limit.
func auditHistoryFiltersOrdersAndLimits(t *testing.T, h *Harness) {
	k1, k2, k3 := hash("audit-h1"), hash("audit-h2"), hash("audit-h3")
	base := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	ev := func(id string, kh string, at time.Duration) store.AuditEvent {
		return store.AuditEvent{ID: id, Kind: store.AuditReplay, At: base.Add(at), Tenant: "acme", Scope: "s",
			KeyHash: kh, Attempt: 1}
	}
	id := func(n int) string { return fmt.Sprintf("%032x", n) }
	// Written out of order; 3 and 4 share k1's latest time, 1 and 2 k2's.
	mine := []store.AuditEvent{ev(id(4), k1, 3*time.Microsecond), ev(id(9), k2, 0), ev(id(3), k1, 3*time.Microsecond),
		ev(id(2), k2, time.Microsecond), ev(id(1), k2, time.Microsecond), ev(id(7), k1, -time.Hour)}
	others := []store.AuditEvent{ev(id(20), k3, 0), ev(id(21), k1, 0), ev(id(22), k1, 0), ev(id(23), k1, 0)}
	others[1].Tenant = "Acme"
	others[2].Scope = "S"
	others[3].Tenant, others[3].Scope = "globex", "s"
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), append(append([]store.AuditEvent{}, mine...), others...)))

	want := []store.AuditEvent{mine[5], mine[1], mine[4], mine[3], mine[2], mine[0]} // ids 7, 9, 1, 2, 3, 4
	require.Equal(t, want, history(t, h, k1, k2))
	require.Equal(t, []store.AuditEvent{mine[5], mine[2], mine[0]}, history(t, h, k1))
	for limit, n := range map[int]int{1: 1, 4: 4, 6: 6, 100: 6} {
		got, err := h.Store.History(ctxFor(t), "acme", "s", []string{k2, k1}, limit)
		require.NoError(t, err)
		require.Equal(t, want[:n], got, "limit %d: the oldest %d", limit, n)
	}
	got, err := h.Store.History(ctxFor(t), "Acme", "s", []string{k1, k2}, 100)
	require.NoError(t, err)
	require.Equal(t, []store.AuditEvent{others[1]}, got, "tenants differing in case are two tenants")
	got, err = h.Store.History(ctxFor(t), "acme", "s", []string{hash("audit-none")}, 100)
	require.NoError(t, err)
	require.Empty(t, got)
	for _, limit := range []int{0, -1} { // no events, never a panic
		got, err := h.Store.History(ctxFor(t), "acme", "s", []string{k1, k2}, limit)
		require.NoError(t, err)
		require.Empty(t, got, "limit %d", limit)
	}
	got, err = h.Store.History(ctxFor(t), "acme", "s", nil, 100)
	require.NoError(t, err)
	require.Empty(t, got, "no hash, no events")
}

// Times come back in UTC to the microsecond, truncated (never rounded into
// the next microsecond); every field round-trips, an empty one as empty.
func auditTimesRoundTrip(t *testing.T, h *Harness) {
	kh := hash("audit-times")
	zone := time.FixedZone("UTC-7", -7*3600)
	e := store.AuditEvent{ID: nonce(), Kind: store.AuditReplay, Tenant: "acme", Scope: "s", KeyHash: kh,
		At:         time.Date(2026, 12, 31, 16, 59, 59, 999_999_999, zone), // 23:59:59.999999 UTC
		OriginalAt: time.Date(2026, 1, 2, 3, 4, 5, 6_789, zone), Attempt: 3, Actor: "Zoë 🙂 h:ab"}
	plain := store.AuditEvent{ID: nonce(), Kind: store.AuditAbandoned, Tenant: "acme", Scope: "s", KeyHash: kh,
		At: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), Attempt: 1, StopReason: sanitize.StopReason("timeout")}
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{plain, e}))
	got := history(t, h, kh)
	require.Len(t, got, 2)
	require.Equal(t, time.Date(2026, 12, 31, 23, 59, 59, 999_999_000, time.UTC), got[0].At)
	require.Equal(t, time.UTC, got[0].At.Location())
	require.Equal(t, time.Date(2026, 1, 2, 10, 4, 5, 6_000, time.UTC), got[0].OriginalAt)
	require.Equal(t, stored(e), got[0])
	require.Equal(t, plain, got[1])
	require.True(t, got[1].OriginalAt.IsZero())
	require.Empty(t, got[1].Detail)
	require.Empty(t, got[1].Actor)
}

func auditBrokenStoreFails(t *testing.T, h *Harness) {
	h.Break(t)
	require.Error(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{auditEvent(store.AuditReplay, hash("x"))}))
	_, err := h.Store.History(ctxFor(t), "acme", "s", []string{hash("x")}, 10)
	require.Error(t, err)
	e := auditEvent(store.AuditClaimed, hash("x"))
	_, err = h.Store.Claim(ctxFor(t), store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: hash("x"),
		Fingerprint: hash("fp"), Nonce: nonce(), TTL: time.Hour, Audit: &e})
	require.Error(t, err)
	require.NotErrorIs(t, err, store.ErrDuplicate)
}
