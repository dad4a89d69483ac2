package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/store"
)

// staleEdge is one row at an edge of the staleness rule (store.Record.Stale
// and Reclaimable), and what the rule says of it for a reader whose
// StaleAfter is staleFallback.
type staleEdge struct {
	name  string
	lease time.Duration // the owner's lease; 0 for a row without one
	ttl   time.Duration
	age   time.Duration // how far back every time of the row is moved
	// beat heartbeats the row after ageing it: a fresh heartbeat on an old row.
	beat bool
	// done completes the row (succeeded or failed) before ageing it.
	done store.RowStatus
	// started, when not zero, makes a started row without a heartbeat
	// (heartbeat_at NULL) that started this long ago and expired 30s ago.
	started   time.Duration
	stale     bool // Record.Stale: a takeover may win
	reclaimed bool // Record.Reclaimable: an expired reclaim may win, cleanup deletes it
}

// staleFallback is the reader's StaleAfter in staleEdges: the lease of a
// row that carries none.
const staleFallback = 5 * time.Minute

// staleEdges straddle every edge of the rule by a minute either side, far
// more than the time between reading a row and judging it with a statement.
var staleEdges = []staleEdge{
	{name: "own lease shorter than the reader's, silent past it", lease: time.Minute, ttl: time.Minute, age: 3 * time.Minute, stale: true, reclaimed: true},
	{name: "own lease longer than the reader's, silent within it", lease: 10 * time.Minute, ttl: time.Minute, age: 7 * time.Minute},
	{name: "own lease, silent a minute less than it", lease: 10 * time.Minute, ttl: time.Minute, age: 9 * time.Minute},
	{name: "own lease, silent a minute more than it", lease: 10 * time.Minute, ttl: time.Minute, age: 11 * time.Minute, stale: true, reclaimed: true},
	{name: "no lease, silent a minute less than the reader's", ttl: time.Minute, age: 4 * time.Minute},
	{name: "no lease, silent a minute more than the reader's", ttl: time.Minute, age: 6 * time.Minute, stale: true, reclaimed: true},
	{name: "expired an hour ago, fresh heartbeat", lease: time.Minute, ttl: time.Minute, age: time.Hour, beat: true},
	{name: "stale but not expired", lease: time.Minute, ttl: time.Hour, age: 3 * time.Minute, stale: true},
	{name: "succeeded and expired", ttl: time.Minute, age: 2 * time.Minute, done: store.RowSucceeded, reclaimed: true},
	{name: "succeeded, not expired", ttl: time.Hour, age: 2 * time.Minute, done: store.RowSucceeded},
	{name: "failed and expired", ttl: time.Minute, age: 2 * time.Minute, done: store.RowFailed, reclaimed: true},
	{name: "no heartbeat yet, started within the reader's lease", started: 4 * time.Minute},
	{name: "no heartbeat yet, started past the reader's lease", started: 6 * time.Minute, stale: true, reclaimed: true},
}

// make writes the edge's row under keyHash in scope and returns it as read.
func (e staleEdge) make(t testing.TB, h *Harness, scope, keyHash string) store.Record {
	t.Helper()
	n := nonce()
	id, err := h.Store.Claim(ctxFor(t), store.ClaimParams{Tenant: "acme", Scope: scope, KeyHash: keyHash,
		Fingerprint: hash("fp"), Nonce: n, TTL: e.ttl, Lease: e.lease})
	require.NoError(t, err)
	switch {
	case e.started > 0:
		now := get(t, h, "acme", scope, keyHash).Now
		won, err := h.Store.Release(ctxFor(t), store.ReleaseParams{ID: id, Nonce: n, Prev: &store.Record{
			Status: store.RowStarted, ClaimNonce: nonce(), Attempts: 1, StartedAt: now.Add(-e.started),
			ExpiresAt: now.Add(-30 * time.Second)}})
		require.NoError(t, err)
		require.True(t, won)
	case e.done != "":
		ok, _, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: e.done,
			Response: []byte(`{"ok":true}`), ResponseCode: 200, TTL: e.ttl})
		require.NoError(t, err)
		require.True(t, ok)
	}
	if e.age > 0 {
		h.Age(t, "acme", scope, keyHash, e.age)
	}
	if e.beat {
		ok, err := h.Store.Heartbeat(ctxFor(t), id, n)
		require.NoError(t, err)
		require.True(t, ok)
	}
	r := get(t, h, "acme", scope, keyHash)
	require.Equal(t, e.stale, r.Stale(staleFallback), "%s: Record.Stale", e.name)
	require.Equal(t, e.reclaimed, r.Reclaimable(staleFallback), "%s: Record.Reclaimable", e.name)
	return r
}

// The staleness rule is one definition: for every row at its edges, what
// the guard reads from the row (Record.Stale, Record.Reclaimable), what the
// store's guarded takeover and expired reclaim let win, and what the
// store's cleanup deletes (Harness.Sweep) agree. In particular an expired
// started row whose owner still heartbeats is never deleted, and a row's
// own lease, not the reader's StaleAfter, decides when it has one.
func storeStalenessRuleIsOneDefinition(t *testing.T, h *Harness) {
	if h.Sweep != nil {
		want := 0
		for i, e := range staleEdges {
			e.make(t, h, "cleanup", hash(fmt.Sprint("c", i)))
			if e.reclaimed {
				want++
			}
		}
		require.EqualValues(t, want, h.Sweep(t, staleFallback), "rows cleanup deleted")
		for i, e := range staleEdges {
			_, err := h.Store.Get(ctxFor(t), "acme", "cleanup", hash(fmt.Sprint("c", i)))
			if e.reclaimed {
				require.True(t, errors.Is(err, store.ErrNotFound), "%s: cleanup kept a reclaimable row (%v)", e.name, err)
			} else {
				require.NoError(t, err, "%s: cleanup deleted a row the guard would not reclaim", e.name)
			}
		}
	}
	for i, e := range staleEdges {
		r := e.make(t, h, "takeover", hash(fmt.Sprint("t", i)))
		won, err := h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimStale, ID: r.ID,
			OldNonce: r.ClaimNonce, OldAttempts: r.Attempts, NewNonce: nonce(), StaleAfter: staleFallback, Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, e.stale, won, "%s: a takeover won", e.name)

		r = e.make(t, h, "reclaim", hash(fmt.Sprint("r", i)))
		won, err = h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimExpired, ID: r.ID,
			OldNonce: r.ClaimNonce, OldAttempts: r.Attempts, NewNonce: nonce(), Fingerprint: hash("fp2"),
			TTL: time.Hour, StaleAfter: staleFallback, Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, e.reclaimed, won, "%s: an expired reclaim won", e.name)
	}
}
