package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/faulttest"
)

// An owner cut off from the database (its operation still
// running) and another guard that takes the key over after staleAfter.
// The owner cancels on its own lease timer, so the two executions never
// overlap — 20 runs, each with 0–5 ms of latency on the owner's path.
func TestPartitionedOwnerNeverOverlapsTheTakeover(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	const staleAfter = 750 * time.Millisecond
	cutOff := guard(t, b.viaProxy, storeTimeout(time.Second))
	other := guard(t, b.db.DB)
	rec := faulttest.NewRecorder()
	for run := range 20 {
		lat := time.Duration(rand.N(6)) * time.Millisecond
		b.proxy.SetLatency(lat, lat)
		key := fmt.Sprintf("partition-%02d", run)
		c := idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: key, Inputs: run,
			Settings: idemguard.Settings{StaleAfter: staleAfter}}
		done := make(chan idemguard.Result, 1)
		go func() {
			r, _ := cutOff.Do(context.Background(), c, rec.Op(key, time.Minute))
			done <- r
		}()
		pollUntil(t, 10*time.Second, "the owner to start", func() bool { return len(rec.Runs(key)) == 1 })
		time.Sleep(time.Duration(rand.N(int64(staleAfter / 2)))) // partition at a random point of the lease
		b.proxy.SetBlackhole(true)

		var took idemguard.Result
		pollUntil(t, 20*time.Second, "the takeover", func() bool {
			r, err := other.Do(context.Background(), c, rec.Op(key, 30*time.Millisecond))
			require.NoError(t, err)
			took = r
			return r.Status != idemguard.StatusInProgress
		})
		require.Equal(t, idemguard.StatusSucceeded, took.Status)
		require.Equal(t, 2, took.Attempt, "run %d: the key was taken over", run)
		b.proxy.SetBlackhole(false)
		select {
		case r := <-done:
			require.NotEqual(t, idemguard.StatusSucceeded, r.Status, "run %d: the cut-off owner's operation finished", run)
		case <-time.After(20 * time.Second):
			t.Fatalf("run %d: the cut-off owner never returned", run)
		}
		require.Len(t, rec.Runs(key), 2)
		require.Empty(t, rec.Overlaps(), "run %d (latency %s)", run, lat)
	}
	b.proxy.SetLatency(0, 0)
	require.Zero(t, rows(t, b.db, "started"))
}
