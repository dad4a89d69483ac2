package storetest

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/idemguardtest"
	"github.com/idemguard/idemguard/internal/testkeys"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// Removing "claim_nonce = ?" (or the status) from the request's guard
// makes this fail: a stale reader would cancel another execution, or a
// finished key.
func jobRequestCancelIsGuardedByTheExecution(t *testing.T, h *Harness) {
	kh := hash("cancel-guard")
	id, n := claimOne(t, h, "acme", "s", kh)
	ok, err := h.Store.RequestCancel(ctxFor(t), store.CancelParams{ID: id, Nonce: nonce()})
	require.NoError(t, err)
	require.False(t, ok, "another execution's nonce")
	require.True(t, get(t, h, "acme", "s", kh).CancelRequestedAt.IsZero())
	for range 2 { // changed = matched: a repeated request still changes the row
		ok, err = h.Store.RequestCancel(ctxFor(t), store.CancelParams{ID: id, Nonce: n})
		require.NoError(t, err)
		require.True(t, ok)
	}
	r := get(t, h, "acme", "s", kh)
	require.False(t, r.CancelRequestedAt.IsZero())
	require.WithinDuration(t, r.Now, r.CancelRequestedAt, time.Minute)
	ok, _, err = h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowSucceeded,
		Response: []byte(`{"ok":true}`), ResponseCode: 200, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = h.Store.RequestCancel(ctxFor(t), store.CancelParams{ID: id, Nonce: n})
	require.NoError(t, err)
	require.False(t, ok, "a finished row has nothing to cancel")
}

// Without the expires_at extension in Renew, the row stays expired after
// the renewal and this fails; without the cancel read-back, the second
// renewal reports no cancel.
func jobRenewReportsCancelAndKeepsTheRowAlive(t *testing.T, h *Harness) {
	kh := hash("renew")
	id, n := claimOne(t, h, "acme", "s", kh) // TTL 1h
	h.Age(t, "acme", "s", kh, 2*time.Hour)   // a run longer than its TTL
	require.True(t, get(t, h, "acme", "s", kh).Expired())
	for range 3 {
		r, err := h.Store.Renew(ctxFor(t), store.RenewParams{ID: id, Nonce: n, Extend: time.Hour})
		require.NoError(t, err)
		require.Equal(t, store.RenewResult{Renewed: true}, r)
	}
	row := get(t, h, "acme", "s", kh)
	require.False(t, row.Expired())
	require.False(t, row.Stale(time.Minute))
	require.False(t, row.ExpiresAt.Before(row.HeartbeatAt.Add(time.Hour)), "expires_at >= now + Extend")
	before := row.ExpiresAt
	r, err := h.Store.Renew(ctxFor(t), store.RenewParams{ID: id, Nonce: n, Extend: time.Minute})
	require.NoError(t, err)
	require.True(t, r.Renewed)
	require.Equal(t, before, get(t, h, "acme", "s", kh).ExpiresAt, "expires_at never moves back")

	ok, err := h.Store.RequestCancel(ctxFor(t), store.CancelParams{ID: id, Nonce: n})
	require.NoError(t, err)
	require.True(t, ok)
	r, err = h.Store.Renew(ctxFor(t), store.RenewParams{ID: id, Nonce: n, Extend: time.Hour})
	require.NoError(t, err)
	require.Equal(t, store.RenewResult{Renewed: true, CancelRequested: true}, r)
	r, err = h.Store.Renew(ctxFor(t), store.RenewParams{ID: id, Nonce: nonce(), Extend: time.Hour})
	require.NoError(t, err)
	require.Equal(t, store.RenewResult{}, r, "another execution's nonce renews nothing")
}

// Without "cancel_requested_at = NULL" in the reclaims, the new execution
// would be cancelled at its first heartbeat; without the attempt given
// back, three cancels would exhaust the key.
func jobReclaimClearsTheCancel(t *testing.T, h *Harness) {
	kh := hash("reclaim-cancel")
	id, n := claimOne(t, h, "acme", "s", kh)
	ok, err := h.Store.RequestCancel(ctxFor(t), store.CancelParams{ID: id, Nonce: n})
	require.NoError(t, err)
	require.True(t, ok)
	h.Age(t, "acme", "s", kh, 10*time.Minute)
	owner := nonce()
	won, err := h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimStale, ID: id,
		OldNonce: n, OldAttempts: 1, NewNonce: owner, StaleAfter: time.Minute})
	require.NoError(t, err)
	require.True(t, won)
	r := get(t, h, "acme", "s", kh)
	require.True(t, r.CancelRequestedAt.IsZero(), "a takeover starts without the old cancel request")
	require.Equal(t, 2, r.Attempts)

	ok, err = h.Store.RequestCancel(ctxFor(t), store.CancelParams{ID: id, Nonce: owner})
	require.NoError(t, err)
	require.True(t, ok)
	ok, _, err = h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: owner, Status: store.RowFailed,
		Response: []byte(`{"ok":false,"stopReason":"canceled"}`), ResponseCode: 409, TTL: time.Hour, Canceled: true})
	require.NoError(t, err)
	require.True(t, ok)
	r = get(t, h, "acme", "s", kh)
	require.Equal(t, store.RowFailed, r.Status)
	require.Equal(t, 1, r.Attempts, "a canceled execution gives its attempt back")

	won, err = h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimFailed, ID: id,
		OldNonce: owner, OldAttempts: 1, NewNonce: nonce(), TTL: time.Hour, MaxAttempts: 2})
	require.NoError(t, err)
	require.True(t, won)
	r = get(t, h, "acme", "s", kh)
	require.Equal(t, store.RowStarted, r.Status)
	require.Equal(t, 2, r.Attempts)
	require.True(t, r.CancelRequestedAt.IsZero(), "a retry starts without the old cancel request")
}

func jobCall(key string) idemguard.Call {
	return idemguard.Call{Tenant: "acme", Scope: "jobs", ClientKey: key, Inputs: map[string]any{"q": key}}
}

func waitForStatus(t *testing.T, h *Harness, keyHash string, st store.RowStatus) store.Record {
	t.Helper()
	var r store.Record
	pollUntil(t, "row "+string(st), func() bool {
		var err error
		r, err = h.Store.Get(ctxFor(t), "acme", "jobs", keyHash)
		return err == nil && r.Status == st
	})
	return r
}

func jobStartAnswersAtOnceAndRunsOnce(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	other, _ := newGuard(t, h)
	b := newBlocker()
	res, err := g.Start(ctxFor(t), jobCall("start-1"), b.op)
	require.NoError(t, err)
	require.True(t, res.Accepted)
	require.Equal(t, idemguard.StatusInProgress, res.Status)
	waitStarted(t, b)
	for _, gg := range []*idemguard.Guard{g, other} {
		dup, err := gg.Start(ctxFor(t), jobCall("start-1"), b.op)
		require.NoError(t, err)
		require.False(t, dup.Accepted, "a duplicate while it runs is the existing job")
		require.Equal(t, idemguard.StatusInProgress, dup.Status)
		require.Equal(t, res.KeyHash, dup.KeyHash)
	}
	close(b.release)
	waitForStatus(t, h, res.KeyHash, store.RowSucceeded)
	replay, err := other.Start(ctxFor(t), jobCall("start-1"), b.op)
	require.NoError(t, err)
	require.True(t, replay.Cached)
	require.Equal(t, idemguard.StatusSucceeded, replay.Status)
	require.EqualValues(t, 1, b.runs.Load())
}

// Without the cancel read-back in the heartbeat, the operation never sees
// ErrCanceled and this times out.
func jobCancelFromAnotherProcess(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h, withHeartbeat(50*time.Millisecond))
	other, _ := newGuard(t, h)
	b := newBlocker()
	res := startedJob(t, g, "cancel-1", b)

	require.ErrorIs(t, other.Cancel(ctxFor(t), testkeys.Client(t, other, "acme", "jobs", "no-such-key")), idemguard.ErrNotFound)
	require.ErrorIs(t, other.Cancel(ctxFor(t), testkeys.Hash(t, other, "globex", "jobs", res.KeyHash)), idemguard.ErrNotFound)
	require.NoError(t, other.Cancel(ctxFor(t), testkeys.Hash(t, other, "acme", "jobs", res.KeyHash)))
	require.True(t, idemguardtest.Jobs(other) == 0 && idemguardtest.Jobs(g) <= 1)

	r := waitForStatus(t, h, res.KeyHash, store.RowFailed)
	require.ErrorIs(t, b.cause.Load().(error), idemguard.ErrCanceled)
	env, err := sanitize.FromJSON(r.Response)
	require.NoError(t, err)
	require.Equal(t, sanitize.Canceled, env.StopReason)
	require.ErrorIs(t, other.Cancel(ctxFor(t), testkeys.Hash(t, other, "acme", "jobs", res.KeyHash)), idemguard.ErrKeyFinished)
	info, err := other.Lookup(ctxFor(t), testkeys.Hash(t, other, "acme", "jobs", res.KeyHash))
	require.NoError(t, err)
	require.Equal(t, store.RowFailed, info.Status)
	require.False(t, info.CancelRequested)

	// The same call runs the key again, and nothing cancels it.
	b2 := newBlocker()
	again, err := other.Start(ctxFor(t), jobCall("cancel-1"), b2.op)
	require.NoError(t, err)
	require.True(t, again.Accepted)
	require.Equal(t, 1, again.Attempt, "the canceled attempt was not counted")
	waitStarted(t, b2)
	close(b2.release)
	waitForStatus(t, h, res.KeyHash, store.RowSucceeded)
	require.EqualValues(t, 1, b2.runs.Load())
}

func collect(t *testing.T, w *idemguard.Watcher) []idemguard.Event {
	t.Helper()
	var evs []idemguard.Event
	for {
		e, err := w.Next(ctxFor(t))
		if errors.Is(err, io.EOF) {
			return evs
		}
		require.NoError(t, err)
		evs = append(evs, e)
	}
}

// startedJob starts the job key with b's operation on g and returns once
// the operation runs.
func startedJob(t *testing.T, g *idemguard.Guard, key string, b *blocker) idemguard.Result {
	t.Helper()
	res, err := g.Start(ctxFor(t), jobCall(key), b.op)
	require.NoError(t, err)
	waitStarted(t, b)
	return res
}

// watchJob watches the job of keyHash through g from its start; the
// watcher is closed when the case ends.
func watchJob(t *testing.T, g *idemguard.Guard, keyHash string) *idemguard.Watcher {
	t.Helper()
	w, err := g.Watch(ctxFor(t), testkeys.Hash(t, g, "acme", "jobs", keyHash), "")
	require.NoError(t, err)
	t.Cleanup(w.Close)
	return w
}

func jobWatchReportsEveryTransition(t *testing.T, h *Harness) {
	stale := idemguard.Settings{StaleAfter: 600 * time.Millisecond}
	owner, _ := newGuard(t, h, func(c *idemguard.Config) { c.Defaults = stale })
	other, _ := newGuard(t, h, func(c *idemguard.Config) { c.Defaults = stale })
	b := newBlocker()
	res := startedJob(t, owner, "watch-1", b)

	remote := watchJob(t, other, res.KeyHash)
	local := watchJob(t, owner, res.KeyHash)
	first, err := remote.Next(ctxFor(t))
	require.NoError(t, err)
	require.Equal(t, idemguard.EventStarted, first.Kind)
	require.Equal(t, 1, first.Attempt)
	alive, err := remote.Next(ctxFor(t))
	require.NoError(t, err)
	require.Equal(t, idemguard.EventAlive, alive.Kind, "a heartbeat (every 200ms) is reported")
	close(b.release)

	for _, w := range []*idemguard.Watcher{remote, local} {
		evs := collect(t, w)
		require.NotEmpty(t, evs)
		last := evs[len(evs)-1]
		require.Equal(t, idemguard.EventSucceeded, last.Kind)
		require.NotNil(t, last.Info.Envelope)
		require.True(t, last.Info.Envelope.OK)
		for _, e := range evs[:len(evs)-1] {
			require.Contains(t, []idemguard.EventKind{idemguard.EventStarted, idemguard.EventAlive}, e.Kind)
		}
		for i := 1; i < len(evs); i++ {
			require.False(t, evs[i].At.Before(evs[i-1].At), "in order: %v then %v", evs[i-1].ID, evs[i].ID)
		}
	}

	// A reconnect after the started event resumes after it; after the
	// final one, there is nothing more.
	resumed, err := other.Watch(ctxFor(t), testkeys.Hash(t, other, "acme", "jobs", res.KeyHash), first.ID)
	require.NoError(t, err)
	evs := collect(t, resumed)
	resumed.Close()
	require.Len(t, evs, 1)
	require.Equal(t, idemguard.EventSucceeded, evs[0].Kind)
	done, err := other.Watch(ctxFor(t), testkeys.Hash(t, other, "acme", "jobs", res.KeyHash), evs[0].ID)
	require.NoError(t, err)
	require.Empty(t, collect(t, done))
	done.Close()
}

// Watchers of a job running in another process poll the row; they are
// admitted against the same bounds as those attached to a local log.
// Without the Admit in Watch's polling branch, the third Watch is let in.
func jobWatchersAreBounded(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	other, _ := newGuard(t, h, func(c *idemguard.Config) { c.MaxWatchersPerKey = 2 })
	b := newBlocker()
	res, err := g.Start(ctxFor(t), jobCall("bounded-1"), b.op)
	require.NoError(t, err)
	defer close(b.release)
	w1, err := other.Watch(ctxFor(t), testkeys.Hash(t, other, "acme", "jobs", res.KeyHash), "")
	require.NoError(t, err)
	watchJob(t, other, res.KeyHash) // the second, held until the case ends
	_, err = other.Watch(ctxFor(t), testkeys.Hash(t, other, "acme", "jobs", res.KeyHash), "")
	require.ErrorIs(t, err, idemguard.ErrTooManyWatchers)
	w1.Close()
	w3, err := other.Watch(ctxFor(t), testkeys.Hash(t, other, "acme", "jobs", res.KeyHash), "")
	require.NoError(t, err)
	w3.Close()
	local, err := g.Watch(ctxFor(t), testkeys.Hash(t, g, "acme", "jobs", res.KeyHash), "")
	require.NoError(t, err, "each process counts its own watchers")
	local.Close()
}

func jobWaitJobs(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	b := newBlocker()
	res := startedJob(t, g, "drain-1", b)
	w := watchJob(t, g, res.KeyHash)
	_, err := w.Next(ctxFor(t)) // started
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctxFor(t), 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, g.WaitJobs(short), context.DeadlineExceeded)
	_, err = w.Next(ctxFor(t))
	require.ErrorIs(t, err, idemguard.ErrShuttingDown, "open watches end, so they do not hold a shutdown")
	_, err = g.Start(ctxFor(t), jobCall("drain-2"), b.op)
	require.ErrorIs(t, err, idemguard.ErrShuttingDown, "no new jobs once draining")
	close(b.release)
	require.NoError(t, g.WaitJobs(ctxFor(t)))
	r, err := h.Store.Get(ctxFor(t), "acme", "jobs", res.KeyHash)
	require.NoError(t, err)
	require.Equal(t, store.RowSucceeded, r.Status, "WaitJobs returns once the outcome is stored")
}

// Without the progress in the renewal statement, the row holds none;
// without its At = the new heartbeat_at, readers cannot tell a new
// report from an old one; a renewal without progress keeps the last one;
// without the reclaims clearing it, a takeover starts from the old
// attempt's count; without it in Complete, a report made after the last
// renewal never reaches the row.
func jobRenewCarriesProgress(t *testing.T, h *Harness) {
	kh := hash("renew-progress")
	id, n := claimOne(t, h, "acme", "s", kh)
	require.Zero(t, get(t, h, "acme", "s", kh).Progress, "a fresh claim has no progress")
	p := store.Progress{Done: 3, Total: 10, Stage: "fetching"}
	r, err := h.Store.Renew(ctxFor(t), store.RenewParams{ID: id, Nonce: n, Extend: time.Hour, Progress: &p})
	require.NoError(t, err)
	require.True(t, r.Renewed)
	row := get(t, h, "acme", "s", kh)
	require.Equal(t, store.Progress{Done: 3, Total: 10, Stage: "fetching", At: row.HeartbeatAt}, row.Progress)

	r, err = h.Store.Renew(ctxFor(t), store.RenewParams{ID: id, Nonce: n, Extend: time.Hour})
	require.NoError(t, err)
	require.True(t, r.Renewed)
	again := get(t, h, "acme", "s", kh)
	require.Equal(t, row.Progress, again.Progress, "a renewal without progress keeps the last one")

	p = store.Progress{Done: 7}
	_, err = h.Store.Renew(ctxFor(t), store.RenewParams{ID: id, Nonce: n, Extend: time.Hour, Progress: &p})
	require.NoError(t, err)
	row = get(t, h, "acme", "s", kh)
	require.Equal(t, store.Progress{Done: 7, At: row.HeartbeatAt}, row.Progress, "no stage is none, not the last one")
	require.True(t, row.Progress.At.After(again.HeartbeatAt))

	other := store.Progress{Done: 9, Total: 10}
	r, err = h.Store.Renew(ctxFor(t), store.RenewParams{ID: id, Nonce: nonce(), Extend: time.Hour, Progress: &other})
	require.NoError(t, err)
	require.False(t, r.Renewed)
	require.Equal(t, row.Progress, get(t, h, "acme", "s", kh).Progress, "another execution's progress is not written")

	h.Age(t, "acme", "s", kh, 10*time.Minute)
	won, err := h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimStale, ID: id,
		OldNonce: n, OldAttempts: 1, NewNonce: nonce(), StaleAfter: time.Minute})
	require.NoError(t, err)
	require.True(t, won)
	require.Zero(t, get(t, h, "acme", "s", kh).Progress, "a takeover starts from zero")

	kh = hash("complete-progress")
	id, n = claimOne(t, h, "acme", "s", kh)
	last := store.Progress{Done: 10, Total: 10, Stage: "done"}
	ok, at, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowSucceeded,
		Response: []byte(`{"ok":true,"stopReason":"completed"}`), ResponseCode: 200, TTL: time.Hour, Progress: &last})
	require.NoError(t, err)
	require.True(t, ok)
	row = get(t, h, "acme", "s", kh)
	require.Equal(t, store.Progress{Done: 10, Total: 10, Stage: "done", At: at}, row.Progress, "the commit carries the last progress")
}
