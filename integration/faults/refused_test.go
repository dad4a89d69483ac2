package faults

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/faulttest"
	"github.com/idemguard/idemguard/store"
)

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
	stop := make(chan struct{})
	keys := make(chan string, 1<<12)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("c%d-%d", c, n)
				keys <- key
				call := idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: key, Inputs: key,
					Settings: idemguard.Settings{StaleAfter: staleAfter}}
				for attempt := 0; ; attempt++ {
					if attempt >= 2000 { // t.Errorf, never require, in a goroutine
						t.Errorf("key %s never succeeded", key)
						return
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
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}

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
	close(stop)
	wg.Wait()
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
