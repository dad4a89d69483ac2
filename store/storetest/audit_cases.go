package storetest

import (
	"fmt"
	"slices"
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

// carried is the claimed event a row carries, as History reads it: the
// claim's ID and Actor, at the row's CreatedAt, attempt 1.
func carried(rec store.Record, e store.AuditEvent) store.AuditEvent {
	return store.AuditEvent{ID: e.ID, Kind: store.AuditClaimed, At: rec.CreatedAt, Tenant: rec.Tenant, Scope: rec.Scope,
		KeyHash: rec.KeyHash, Attempt: 1, Actor: e.Actor}
}

// A claim's event is carried by its row (store.ClaimParams.Audit): there
// exactly when the row is, dated by the row. Removing the duplicate check
// before the event, or storing the event apart from the claim, leaves an
// event for a claim that never happened.
func auditClaimWritesItsEventOnlyWhenItWins(t *testing.T, h *Harness) {
	kh := hash("audit-claim")
	won := auditEvent(store.AuditClaimed, kh)
	won.Actor = "h:0123456789abcdef"
	id, err := h.Store.Claim(ctxFor(t), store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: kh,
		Fingerprint: hash("fp"), Nonce: nonce(), TTL: time.Hour, Audit: &won})
	require.NoError(t, err)
	require.NotZero(t, id)
	rec := get(t, h, "acme", "s", kh)
	require.Equal(t, []store.AuditEvent{carried(rec, won)}, history(t, h, kh))

	lost := auditEvent(store.AuditClaimed, kh)
	_, err = h.Store.Claim(ctxFor(t), store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: kh,
		Fingerprint: hash("fp"), Nonce: nonce(), TTL: time.Hour, Audit: &lost})
	require.ErrorIs(t, err, store.ErrDuplicate)
	require.Equal(t, []store.AuditEvent{carried(rec, won)}, history(t, h, kh), "a duplicate claim writes no event")

	// The trail holding the claim's event id already (cleanup moves it a
	// moment before it deletes the row): History shows the event once.
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{won}))
	require.Equal(t, storedAll(won), history(t, h, kh), "one claim, not two")

	// A claim without an event writes none.
	other := hash("audit-claim-plain")
	claimOne(t, h, "acme", "s", other)
	require.Empty(t, history(t, h, other))
}

// What overwrites or deletes a row moves the claimed event it carries to
// the trail with its own event, so the claim outlives the row: the release
// of the claim (the row goes) and an expired re-claim (the row starts
// afresh, carrying nothing). A losing write moves nothing. Dropping the
// move loses the claim from the key's history.
func auditClaimOutlivesItsRow(t *testing.T, h *Harness) {
	claim := func(kh, actor string) (store.AuditEvent, uint64, string) {
		t.Helper()
		e := auditEvent(store.AuditClaimed, kh)
		e.Actor = actor
		n := nonce()
		id, err := h.Store.Claim(ctxFor(t), store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: kh,
			Fingerprint: hash("fp"), Nonce: n, TTL: time.Hour, Audit: &e})
		require.NoError(t, err)
		return e, id, n
	}

	kh := hash("audit-claim-released")
	e, id, n := claim(kh, "key:a")
	rec := get(t, h, "acme", "s", kh)
	won, err := h.Store.Release(ctxFor(t), store.ReleaseParams{ID: id, Nonce: nonce(), Audit: ptr(auditEvent(store.AuditReleased, kh))})
	require.NoError(t, err)
	require.False(t, won)
	require.Equal(t, []store.AuditEvent{carried(rec, e)}, history(t, h, kh), "a losing release moves nothing")
	released := auditEvent(store.AuditReleased, kh)
	released.At = rec.CreatedAt.Add(time.Second)
	won, err = h.Store.Release(ctxFor(t), store.ReleaseParams{ID: id, Nonce: n, Audit: &released})
	require.NoError(t, err)
	require.True(t, won)
	require.Equal(t, []store.AuditEvent{carried(rec, e), stored(released)}, history(t, h, kh), "the claim outlives its row")

	kh = hash("audit-claim-expired")
	e, id, n = claim(kh, "key:b")
	ok, _, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowSucceeded,
		Response: []byte(`{"ok":true}`), ResponseCode: 200, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
	h.Age(t, "acme", "s", kh, 2*time.Hour)
	rec = get(t, h, "acme", "s", kh)
	again := auditEvent(store.AuditExpiredReclaim, kh)
	again.At, again.Actor = rec.Now, "key:c"
	won, err = h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimExpired, ID: id, OldNonce: n,
		OldAttempts: 1, NewNonce: nonce(), Fingerprint: hash("fp2"), TTL: time.Hour, StaleAfter: time.Minute, Audit: &again})
	require.NoError(t, err)
	require.True(t, won)
	require.Equal(t, []store.AuditEvent{carried(rec, e), stored(again)}, history(t, h, kh),
		"the old claim is in the trail once, the new row carries none")

	// A write without an event (a replica with the trail off) writes none, and the claim
	// goes with its row: one statement, as without the trail.
	kh = hash("audit-claim-unaudited")
	_, id, n = claim(kh, "key:d")
	won, err = h.Store.Release(ctxFor(t), store.ReleaseParams{ID: id, Nonce: n})
	require.NoError(t, err)
	require.True(t, won)
	require.Empty(t, history(t, h, kh))
}

func ptr[T any](v T) *T { return &v }

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

// A durable event written again (a batch retried after an unknown
// outcome) is stored once: an id already stored is skipped, its first
// version kept, and the rest of the batch written.
func auditAppendSkipsARepeatedID(t *testing.T, h *Harness) {
	kh := hash("audit-append")
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), nil))
	a, b, c := auditEvent(store.AuditTakeover, kh), auditEvent(store.AuditAbandoned, kh), auditEvent(store.AuditReleased, kh)
	b.StopReason = sanitize.StopReason("abandoned")
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{a, b}))
	again := b
	again.Kind, again.StopReason = store.AuditCanceled, ""
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{again, c}))
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{a, b, c}))
	require.Equal(t, storedAll(a, b, c), history(t, h, kh))

	// An id twice in one batch: the first is kept.
	d := auditEvent(store.AuditRetried, kh)
	dAgain := d
	dAgain.Attempt = 9
	e := auditEvent(store.AuditRetried, kh)
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{d, dAgain, e, d}))
	require.Equal(t, storedAll(a, b, c, d, e), history(t, h, kh))

	// A durable event already stored (its batch copy, say) does not make
	// the audited write fail: the row changes, the event stays one.
	ckh := hash("audit-append-cancel")
	id, n := claimOne(t, h, "acme", "s", ckh)
	cancel := auditEvent(store.AuditCanceled, ckh)
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{cancel}))
	won, err := h.Store.RequestCancel(ctxFor(t), store.CancelParams{ID: id, Nonce: n, Audit: &cancel})
	require.NoError(t, err)
	require.True(t, won)
	require.Equal(t, storedAll(cancel), history(t, h, ckh))
}

// Replays, in-progress answers and conflicts are tallied per key, kind,
// attempt, actor and detail: a storm adds counts, never entries, and
// History tells each actor's count with its first and last time (the
// first event's ID and OriginalAt), whatever the order and the batches
// they came in. A store that keeps one entry per event fails the count of
// entries; one that tallies per key alone loses who replayed.
func auditTalliesReadOnlyDecisions(t *testing.T, h *Harness) {
	kh := hash("audit-tally")
	base := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	var n atomic.Int64
	ev := func(kind store.AuditKind, actor string, at time.Duration, attempt int, detail string) store.AuditEvent {
		e := store.AuditEvent{ID: fmt.Sprintf("%032x", n.Add(1)), Kind: kind, At: base.Add(at), Tenant: "acme",
			Scope: "s", KeyHash: kh, Attempt: attempt, Actor: actor, Detail: detail}
		if kind == store.AuditReplay {
			e.OriginalAt = base.Add(-time.Hour + time.Duration(attempt)*time.Minute)
		}
		return e
	}
	// A storm of 1000 replays by two actors, in batches of 100, each batch
	// out of order.
	var storm []store.AuditEvent
	for i := range 1000 {
		actor := "key:a"
		if i%4 == 3 {
			actor = "key:b"
		}
		storm = append(storm, ev(store.AuditReplay, actor, time.Duration(i+10)*time.Millisecond, 1, ""))
	}
	for i := 0; i < len(storm); i += 100 {
		batch := slices.Clone(storm[i : i+100])
		slices.Reverse(batch)
		require.NoError(t, h.Store.AppendAudit(ctxFor(t), batch))
	}
	others := []store.AuditEvent{
		ev(store.AuditInProgress, "key:a", 0, 1, store.InProgressAnswered),
		ev(store.AuditInProgress, "key:a", 5*time.Millisecond, 1, store.InProgressAnswered),
		ev(store.AuditInProgress, "key:a", 6*time.Millisecond, 1, store.InProgressWaited),
		ev(store.AuditConflict, "key:b", 2*time.Second, 1, ""),
		ev(store.AuditReplay, "key:a", 3*time.Second, 2, ""),
		ev(store.AuditReplay, "key:a", 4*time.Second, 2, ""),
		ev(store.AuditReplay, "", 5*time.Second, 2, ""),
	}
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), others))
	// A replay earlier than every counted one: the tally's first time, ID
	// and original time become its.
	early := ev(store.AuditReplay, "key:b", 8*time.Millisecond, 1, "")
	early.OriginalAt = base.Add(-2 * time.Hour)
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{early}))

	tally := func(first store.AuditEvent, last time.Duration, count int64) store.AuditEvent {
		first.Count, first.LastAt = count, base.Add(last)
		return first
	}
	want := []store.AuditEvent{
		tally(others[0], 5*time.Millisecond, 2),  // in_progress answered, key:a
		tally(others[2], 6*time.Millisecond, 1),  // in_progress waited, key:a
		tally(early, 1009*time.Millisecond, 251), // replays of attempt 1 by key:b: 250 + the early one
		tally(storm[0], 1008*time.Millisecond, 750),
		tally(others[3], 2*time.Second, 1),
		tally(others[4], 4*time.Second, 2),
		tally(others[6], 5*time.Second, 1),
	}
	require.Equal(t, want, history(t, h, kh))
}

// A tallied event may be a tally its caller counted already (Count events
// from At to LastAt: the engine counts a flush window's replays before it
// writes them): the store adds its Count, keeps the earliest At with its ID
// and OriginalAt and the latest LastAt, mixed with single events in any
// order and batch. A Count below 1 is one event; a LastAt zero or before
// At is At. A store that counts each event as one fails the counts; one
// that ignores LastAt, the last times.
func auditAppendAddsCallersTallies(t *testing.T, h *Harness) {
	kh := hash("audit-pre-tallied")
	base := time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)
	ev := func(id int, actor string, at, last time.Duration, count int64) store.AuditEvent {
		e := store.AuditEvent{ID: fmt.Sprintf("%032x", 0x7a11e0+id), Kind: store.AuditReplay, At: base.Add(at),
			Tenant: "acme", Scope: "s", KeyHash: kh, Attempt: 1, Actor: actor, OriginalAt: base.Add(at - time.Hour),
			Count: count}
		if last != 0 {
			e.LastAt = base.Add(last)
		}
		return e
	}
	a1 := ev(1, "key:a", time.Second, 3*time.Second, 40)   // 40 replays from 1s to 3s
	a2 := ev(2, "key:a", 2*time.Second, 5*time.Second, 10) // 10 more, the last at 5s
	a3 := ev(3, "key:a", 4*time.Second, 0, 0)              // a single event
	b1 := ev(4, "key:b", 10*time.Second, 12*time.Second, 1000)
	b0 := ev(5, "key:b", 9*time.Second, 8*time.Second, -3) // one event, at 9s
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{a2, b1, a3}))
	require.NoError(t, h.Store.AppendAudit(ctxFor(t), []store.AuditEvent{b0, a1, a1}))

	wantA, wantB := a1, b0
	wantA.Count, wantA.LastAt = 40+10+1+40, base.Add(5*time.Second)
	wantB.Count, wantB.LastAt = 1000+1, base.Add(12*time.Second)
	require.Equal(t, []store.AuditEvent{wantA, wantB}, history(t, h, kh))
}

// History: only (tenant, scope)'s events of the given hashes (tenants and
// scopes are byte-exact), oldest first, a tie in At broken by ID, at most
// limit.
func auditHistoryFiltersOrdersAndLimits(t *testing.T, h *Harness) {
	k1, k2, k3 := hash("audit-h1"), hash("audit-h2"), hash("audit-h3")
	base := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	ev := func(id string, kh string, at time.Duration) store.AuditEvent {
		return store.AuditEvent{ID: id, Kind: store.AuditTakeover, At: base.Add(at), Tenant: "acme", Scope: "s",
			KeyHash: kh, Attempt: 2}
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
	want := stored(e)
	want.Count, want.LastAt = 1, want.At // a tally of one
	require.Equal(t, want, got[0])
	require.Equal(t, time.UTC, got[0].LastAt.Location())
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
