package idemguard_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/idemguardtest"
	"github.com/idemguard/idemguard/internal/faulttest"
	"github.com/idemguard/idemguard/store/memstore"
)

// A replay cache entry lives no longer than its row: its lifetime (the
// row's remaining TTL on the store's clock) is counted from before the
// read, so a slow reply cannot stretch it past the row's expiry.
func TestReplayCacheLifetimeCountsFromBeforeTheRead(t *testing.T) {
	t.Parallel()
	var fs *faulttest.Store
	var cfg idemguard.Config
	b := setup(t, func(c *idemguard.Config) {
		fs = faulttest.NewStore(c.Store)
		c.Store = fs
		cfg = *c
	})
	replica, err := idemguard.New(cfg) // another process: it learns of the row by reading it
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, replica.Close(context.Background())) })
	var runs atomic.Int32
	call := idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1, Settings: idemguard.Settings{TTL: time.Minute}}
	_, err = b.guard.Do(context.Background(), call, okOp(&runs)) // the row expires at t0+60s
	require.NoError(t, err)

	b.clock.Advance(10 * time.Second)
	fs.Inject(faulttest.OpGet, faulttest.Fault{After: func(context.Context) { b.clock.Advance(20 * time.Second) }})
	r, err := replica.Do(context.Background(), call, okOp(&runs)) // read at t0+10s: 50s left; answered at t0+30s
	require.NoError(t, err)
	require.True(t, r.Cached)

	b.clock.Advance(35 * time.Second) // t0+65s: the row has expired
	r, err = replica.Do(context.Background(), call, okOp(&runs))
	require.NoError(t, err)
	require.False(t, r.Cached, "a replay was served from memory after its row expired")
	require.EqualValues(t, 2, runs.Load())
}

// Idempotent-Completed-At comes from the store's clock on every replay,
// from memory too, even when this server's clock is an hour off.
func TestReplayCompletionTimeIsTheStoresOnEveryReplay(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Date(2026, 11, 20, 3, 0, 0, 0, time.UTC)}
	store := memstore.New(memstore.WithClock(func() time.Time { return clock.Now().Add(time.Hour) }))
	var fromMemory atomic.Int32
	cfg := idemguard.Config{Store: store, Secret: secret, Observe: func(e idemguard.Event) {
		if e.FromMemory {
			fromMemory.Add(1)
		}
	}}
	idemguardtest.SetClock(&cfg, clock.Now)
	g, err := idemguard.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
	var runs atomic.Int32
	call := idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1}
	first, err := g.Do(context.Background(), call, okOp(&runs))
	require.NoError(t, err)
	rows := store.Rows()
	require.Len(t, rows, 1)
	require.Equal(t, rows[0].CompletedAt, first.CompletedAt)
	for range 3 {
		clock.Advance(time.Second)
		r, err := g.Do(context.Background(), call, okOp(&runs))
		require.NoError(t, err)
		require.True(t, r.Cached)
		require.Equal(t, rows[0].CompletedAt, r.CompletedAt)
	}
	require.Positive(t, fromMemory.Load(), "no replay came from memory")
	require.EqualValues(t, 1, runs.Load())
}
