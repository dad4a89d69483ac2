package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/faulttest"
	"github.com/idemguard/idemguard/store"
)

// A database outage under load. Two replicas (guards) share
// one database through a fault proxy; 16 clients work through 400 distinct
// keys, retrying 503s and 409s, while the proxy drops every connection
// twice and then blackholes the database for two seconds. Every call is
// answered within its bound, every key ends succeeded having run exactly
// once, the service recovers within 5 s of the database's return with no
// restart, and nothing is left started.
func TestDatabaseOutageUnderLoad(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	const (
		keys         = 400
		clients      = 16
		storeTO      = 400 * time.Millisecond
		staleAfter   = 5 * time.Second
		callBound    = staleAfter + 2*storeTO // a commit retries while the lease holds; a claim and its settling take 2 store timeouts
		blackholeFor = 2 * time.Second
	)
	var storeErrors atomic.Int32
	observe := func(c *idemguard.Config) {
		c.Observe = func(e idemguard.Event) {
			if e.Kind == idemguard.EventStoreError {
				storeErrors.Add(1)
			}
		}
	}
	replicas := []*idemguard.Guard{
		guard(t, b.viaProxy, storeTimeout(storeTO), observe),
		guard(t, b.viaProxy, storeTimeout(storeTO), observe),
	}
	rec := faulttest.NewRecorder()

	start := time.Now()
	var returnedAt time.Time
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		time.Sleep(300 * time.Millisecond)
		b.proxy.Drop()
		time.Sleep(400 * time.Millisecond)
		b.proxy.Drop()
		time.Sleep(300 * time.Millisecond)
		b.proxy.SetBlackhole(true)
		time.Sleep(blackholeFor)
		b.proxy.SetBlackhole(false)
		returnedAt = time.Now()
	}()

	work := make(chan int)
	var mu sync.Mutex
	var lastFailure time.Time
	var slow []string
	var slowest time.Duration
	var failures []string
	unavailable := 0
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			for k := range work {
				key := fmt.Sprintf("load-%03d", k)
				c := idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: key, Inputs: k,
					Settings: idemguard.Settings{StaleAfter: staleAfter}}
				deadline := time.Now().Add(time.Minute)
				for attempt := 0; ; attempt++ {
					require.True(t, time.Now().Before(deadline), "key %s never succeeded", key)
					g := replicas[(w+attempt)%len(replicas)]
					began := time.Now()
					res, err := g.Do(context.Background(), c, rec.Op(key, 100*time.Millisecond))
					took := time.Since(began)
					mu.Lock()
					slowest = max(slowest, took)
					if took > callBound {
						slow = append(slow, fmt.Sprintf("%s took %s", key, took))
					}
					ok := err == nil && res.Status == idemguard.StatusSucceeded && !res.LostClaim
					if !ok {
						lastFailure = time.Now()
						what := fmt.Sprint(err)
						if err == nil {
							what = fmt.Sprintf("%s %s lostClaim=%v", res.Status, res.StopReason, res.LostClaim)
						}
						failures = append(failures, fmt.Sprintf("%s at +%s: %s", key, lastFailure.Sub(start).Round(time.Millisecond), what))
						if errors.Is(err, idemguard.ErrStoreUnavailable) {
							unavailable++
						}
					}
					mu.Unlock()
					if ok {
						break
					}
					if err != nil {
						require.ErrorIs(t, err, idemguard.ErrStoreUnavailable, "key %s", key)
					} else {
						require.Contains(t, []idemguard.Status{idemguard.StatusInProgress, idemguard.StatusSucceeded}, res.Status,
							"key %s: %s %s", key, res.Status, res.StopReason)
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	for k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	<-faultsDone
	t.Logf("%d keys in %s; %d store errors seen by the guards; %d answers were 503; slowest call %s",
		keys, time.Since(start), storeErrors.Load(), unavailable, slowest)

	require.Empty(t, slow, "calls not answered within %s", callBound)
	// The outage was felt: store calls failed, and some call waited out
	// the blackhole (a commit retried while its lease held).
	require.Positive(t, storeErrors.Load())
	require.GreaterOrEqual(t, slowest, blackholeFor/2)
	if !lastFailure.IsZero() {
		require.Less(t, lastFailure.Sub(returnedAt), 5*time.Second,
			"no full recovery within 5s of the database's return (+%s); last failures: %v",
			returnedAt.Sub(start).Round(time.Millisecond), failures[max(0, len(failures)-8):])
	}
	// And the service is whole again: a new key runs at once, without a restart.
	for _, g := range replicas {
		res, err := g.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: "after"},
			rec.Op("after", 0))
		require.NoError(t, err)
		require.Equal(t, idemguard.StatusSucceeded, res.Status)
	}
	require.Empty(t, rec.Overlaps())
	for k := range keys {
		key := fmt.Sprintf("load-%03d", k)
		require.Len(t, rec.Runs(key), 1, "key %s ran %d times", key, len(rec.Runs(key)))
	}
	require.Len(t, rec.Runs("after"), 1)
	pollUntil(t, 10*time.Second, "no started row", func() bool { return rows(t, b.db, "started") == 0 })
	require.Equal(t, keys+1, rows(t, b.db, "succeeded"))
}

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

// One replica loses its database under load (its node shut down: every
// connection refused) while another keeps its own. The replica that cannot
// connect answers 503 at once (nothing was sent: there is nothing to
// re-read) instead of after the store timeout, the other keeps serving,
// the lost replica serves again within a second of its database's return,
// and every key runs exactly once.
func TestRefusedReplicaFailsFastWhileTheOtherServes(t *testing.T) {
	t.Parallel()
	const (
		clients    = 8
		storeTO    = 5 * time.Second
		staleAfter = 5 * time.Second
		refusedFor = 1500 * time.Millisecond
	)
	b := newBench(t)                    // replica 0 reaches the database through b.proxy
	_, pool := proxiedPool(t, b.db.DSN) // replica 1's own way to the database
	replicas := []*idemguard.Guard{guard(t, b.viaProxy, storeTimeout(storeTO)), guard(t, pool, storeTimeout(storeTO))}
	rec := faulttest.NewRecorder()

	var mu sync.Mutex
	var refusedAt, returnedAt time.Time
	var lostSlowest time.Duration // replica 0's slowest call begun while refused
	lostCalls, otherServed := 0, 0
	keys := make(chan string, 1<<12)
	stop := faulttest.Clients(clients, func(c, n int) bool {
		key := fmt.Sprintf("c%d-%d", c, n)
		keys <- key
		call := idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: key, Inputs: key,
			Settings: idemguard.Settings{StaleAfter: staleAfter}}
		for attempt := 0; ; attempt++ {
			if attempt >= 2000 { // t.Errorf, never require, in a goroutine
				t.Errorf("key %s never succeeded", key)
				return false
			}
			r := (c + n + attempt) % len(replicas)
			began := time.Now()
			res, err := replicas[r].Do(context.Background(), call, rec.Op(key, 10*time.Millisecond))
			took := time.Since(began)
			ok := err == nil && res.Status == idemguard.StatusSucceeded && !res.LostClaim
			if err != nil && !errors.Is(err, idemguard.ErrStoreUnavailable) {
				t.Errorf("key %s: %v, want ErrStoreUnavailable", key, err)
			}
			mu.Lock()
			refused := !refusedAt.IsZero() && began.After(refusedAt) && returnedAt.IsZero()
			switch {
			case r == 0 && refused:
				lostCalls++
				lostSlowest = max(lostSlowest, took)
			case r == 1 && refused && ok:
				otherServed++
			}
			mu.Unlock()
			if ok {
				return true
			}
			time.Sleep(5 * time.Millisecond)
		}
	})

	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	refusedAt = time.Now()
	mu.Unlock()
	b.proxy.Refuse()
	time.Sleep(refusedFor)
	require.NoError(t, b.proxy.Accept())
	mu.Lock()
	returnedAt = time.Now()
	mu.Unlock()
	// The lost replica answers again, by its background probe alone.
	var firstBack time.Duration
	for n := 0; firstBack == 0; n++ {
		key := fmt.Sprintf("back-%d", n)
		res, err := replicas[0].Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: key, Inputs: key},
			rec.Op(key, 0))
		if err == nil {
			require.Equal(t, idemguard.StatusSucceeded, res.Status)
			firstBack = time.Since(returnedAt)
			keys <- key
			break
		}
		require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
		require.ErrorIs(t, err, store.ErrNotSent, "the probe has not reached the database yet: nothing was sent")
		require.Empty(t, rec.Runs(key), "a 503 ran the operation")
		require.Less(t, time.Since(returnedAt), 10*time.Second, "the lost replica never served again")
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	close(keys)

	t.Logf("while refused: %d calls to the lost replica, slowest %s; %d served by the other; lost replica back %s after the return",
		lostCalls, lostSlowest, otherServed, firstBack)
	require.Positive(t, lostCalls)
	require.Less(t, lostSlowest, time.Second, "a call to the lost replica waited for the store timeout (%s)", storeTO)
	require.Positive(t, otherServed, "the other replica did not serve")
	require.Less(t, firstBack, time.Second)
	require.Empty(t, rec.Overlaps())
	n := 0
	for key := range keys {
		require.Len(t, rec.Runs(key), 1, "key %s ran %d times", key, len(rec.Runs(key)))
		n++
	}
	require.Equal(t, n, rows(t, b.db, "succeeded"))
}
