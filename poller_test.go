package idemguard

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
)

// readCounter counts the row reads (Store.Get) a guard makes.
type readCounter struct {
	*memstore.Store
	gets atomic.Int64
}

func (s *readCounter) Get(ctx context.Context, tenant, scope, keyHash string) (store.Record, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, tenant, scope, keyHash)
}

// 100 watchers of one running key cost about one watcher's reads, whether
// the key runs in another process or in this one. Each watcher used to
// poll for itself, its backoff reset by every heartbeat: 100 watchers read
// the row about 100 times as often as one (~930 SELECT/s on MariaDB).
func TestWatchersOfOneKeyShareOnePoller(t *testing.T) {
	t.Parallel()
	mem := memstore.New()
	cfg := func(st store.Store) Config { return Config{Store: st, Defaults: Settings{StaleAfter: time.Second}} }
	owner := newTestGuard(t, cfg(mem))
	local := &readCounter{Store: mem}
	ownerCounted := newTestGuard(t, cfg(local))
	remote := &readCounter{Store: mem}
	watcher := newTestGuard(t, cfg(remote))
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	remoteKey, localKey := startHeld(t, owner, "remote", release), startHeld(t, ownerCounted, "local", release)

	for _, tc := range []struct {
		name string
		g    *Guard
		gets *atomic.Int64
		key  Key
	}{
		{"key running in another process", watcher, &remote.gets, remoteKey},
		{"key running in this process", ownerCounted, &local.gets, localKey},
	} {
		one := readsOf(t, tc.g, tc.gets, tc.key, 1)
		hundred := readsOf(t, tc.g, tc.gets, tc.key, 100)
		t.Logf("%s: reads in a second: 1 watcher %d, 100 watchers %d", tc.name, one, hundred)
		require.LessOrEqual(t, hundred, 2*one+4, "%s: 100 watchers read %d times where one read %d", tc.name, hundred, one)
	}
}

// startHeld starts key as a background job of g that runs until release
// closes, and returns its Key.
func startHeld(t *testing.T, g *Guard, key string, release <-chan struct{}) Key {
	t.Helper()
	hold := func(ctx context.Context) (any, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return map[string]any{"ok": true}, nil
	}
	res, err := g.Start(context.Background(), Call{Tenant: "acme", Scope: "job", ClientKey: key, Inputs: map[string]any{}}, hold)
	require.NoError(t, err)
	require.True(t, res.Accepted)
	k, err := g.Key("acme", "job", key)
	require.NoError(t, err)
	return k
}

// readsOf is the reads g makes (gets) in a second while n watchers follow
// key. The window is real time: what it measures is the rate of the
// poller's reads, driven by real heartbeats and backoff timers.
func readsOf(t *testing.T, g *Guard, gets *atomic.Int64, key Key, n int) int64 {
	t.Helper()
	wctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		w, err := g.Watch(wctx, key, "")
		require.NoError(t, err)
		wg.Go(func() {
			defer w.Close()
			for {
				if _, err := w.Next(wctx); err != nil {
					return
				}
			}
		})
	}
	before := gets.Load()
	time.Sleep(time.Second) // the measurement window: real heartbeats and polls
	reads := gets.Load() - before
	cancel()
	wg.Wait()
	return reads
}
