package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/faulttest"
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
