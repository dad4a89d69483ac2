package idemguard_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard"

	"github.com/idemguard/idemguard/idemguardtest"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var secret = []byte("engine-test-secret-0123456789abcdef")

type testBundle struct {
	st    *memstore.Store
	guard *idemguard.Guard
	clock *fakeClock
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func setup(t *testing.T, mutate ...func(*idemguard.Config)) *testBundle {
	t.Helper()
	clock := &fakeClock{now: time.Date(2026, 11, 20, 3, 0, 0, 0, time.UTC)}
	st := memstore.New(memstore.WithClock(clock.Now))
	cfg := idemguard.Config{Store: st, Secret: secret}
	idemguardtest.SetClock(&cfg, clock.Now)
	for _, m := range mutate {
		m(&cfg)
	}
	g, err := idemguard.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
	return &testBundle{st: st, guard: g, clock: clock}
}

func okOp(runs *atomic.Int32) idemguard.Operation {
	return func(context.Context) (any, error) {
		runs.Add(1)
		return map[string]any{"ok": true, "data": map[string]any{"n": 1}}, nil
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	for name, tc := range map[string]struct {
		cfg  idemguard.Config
		want string
	}{
		"no store":                       {idemguard.Config{Secret: secret}, "Config.Store"},
		"short secret":                   {idemguard.Config{Store: st, Secret: []byte("short")}, "Config.Secret"},
		"audit observe without observer": {idemguard.Config{Store: st, Secret: secret, Audit: idemguard.AuditConfig{Observe: true}}, "Config.Observe"},
		"bad default":                    {idemguard.Config{Store: st, Secret: secret, Defaults: idemguard.Settings{StaleAfter: time.Millisecond}}, "StaleAfter"},
		"bad policy":                     {idemguard.Config{Store: st, Secret: secret, Defaults: idemguard.Settings{StalePolicy: "never"}}, "StalePolicy"},
		"bad size":                       {idemguard.Config{Store: st, Secret: secret, MaxResponseBytes: 10}, "MaxResponseBytes"},
		"negative":                       {idemguard.Config{Store: st, Secret: secret, MaxWait: -1}, "negative"},
	} {
		_, err := idemguard.New(tc.cfg)
		require.ErrorContains(t, err, tc.want, name)
	}
}

func TestReplayCacheRespectsTTLAndMaxAge(t *testing.T) {
	t.Parallel()
	var events []idemguard.Event
	var mu sync.Mutex
	b := setup(t, func(c *idemguard.Config) {
		c.ReplayCacheMaxAge = time.Minute
		c.Observe = func(e idemguard.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }
	})
	var runs atomic.Int32
	call := idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1, Settings: idemguard.Settings{TTL: 10 * time.Minute}}
	first, err := b.guard.Do(context.Background(), call, okOp(&runs))
	require.NoError(t, err)
	fromMemory := func() bool {
		mu.Lock()
		defer mu.Unlock()
		e := events[len(events)-1]
		return e.Kind == idemguard.EventReplayed && e.FromMemory
	}

	r, err := b.guard.Do(context.Background(), call, okOp(&runs))
	require.NoError(t, err)
	require.True(t, fromMemory(), "a fresh commit is cached")
	require.Equal(t, string(first.Body), strings.Replace(string(r.Body), `"cached":true`, `"cached":false`, 1))

	b.clock.Advance(2 * time.Minute) // past ReplayCacheMaxAge: ask the store again
	r, err = b.guard.Do(context.Background(), call, okOp(&runs))
	require.NoError(t, err)
	require.True(t, r.Cached)
	require.False(t, fromMemory())

	b.clock.Advance(9 * time.Minute) // past the row's TTL: never served from memory
	r, err = b.guard.Do(context.Background(), call, okOp(&runs))
	require.NoError(t, err)
	require.False(t, r.Cached, "an expired key runs again")
	require.EqualValues(t, 2, runs.Load())
}

func TestReplayCacheEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	var fromMemory atomic.Int32
	b := setup(t, func(c *idemguard.Config) {
		c.ReplayCacheSize = 2
		c.Observe = func(e idemguard.Event) {
			if e.FromMemory {
				fromMemory.Add(1)
			}
		}
	})
	var runs atomic.Int32
	for _, in := range []int{1, 2, 1, 3, 1, 2} { // 3 evicts 2 (1 was used more recently)
		_, err := b.guard.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: in}, okOp(&runs))
		require.NoError(t, err)
	}
	require.EqualValues(t, 3, runs.Load())
	require.EqualValues(t, 2, fromMemory.Load(), "the two replays of 1 come from memory, the replay of 2 from the store")
}

func TestCloseRecordsCutOffOperations(t *testing.T) {
	t.Parallel()
	for policy, want := range map[idemguard.StalePolicy]sanitize.StopReason{
		idemguard.StaleTakeover: sanitize.Timeout,
		idemguard.StaleFail:     sanitize.Abandoned,
	} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			clock := time.Now
			st := memstore.New(memstore.WithClock(clock))
			g, err := idemguard.New(idemguard.Config{Store: st, Secret: secret})
			require.NoError(t, err)
			started := make(chan struct{})
			var cause atomic.Value
			done := make(chan idemguard.Result, 1)
			call := idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1, Settings: idemguard.Settings{StalePolicy: policy}}
			go func() {
				r, _ := g.Do(context.Background(), call, func(ctx context.Context) (any, error) {
					close(started)
					<-ctx.Done()
					cause.Store(context.Cause(ctx))
					return nil, ctx.Err()
				})
				done <- r
			}()
			<-started
			require.NoError(t, g.Close(context.Background()))
			r := <-done
			require.ErrorIs(t, cause.Load().(error), idemguard.ErrShuttingDown)
			require.Equal(t, want, r.StopReason)
			rows := st.Rows()
			require.Len(t, rows, 1)
			require.Equal(t, store.RowFailed, rows[0].Status)
			require.Contains(t, string(rows[0].Response), string(want))
		})
	}
}

func TestDetachedOperationOutlivesItsCaller(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	done := make(chan idemguard.Result, 1)
	go func() {
		r, _ := b.guard.Do(ctx, idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1, Detach: true},
			func(opCtx context.Context) (any, error) {
				cancel() // the client hangs up
				<-release
				return map[string]any{"ok": true}, opCtx.Err()
			})
		done <- r
	}()
	close(release)
	r := <-done
	require.Equal(t, idemguard.StatusSucceeded, r.Status, "a detached operation is not cancelled with its caller")
}

// flakyStore loses the reply of the first Complete after applying it.
type flakyStore struct {
	*memstore.Store
	failed atomic.Bool
}

func (f *flakyStore) Complete(ctx context.Context, p store.CompleteParams) (bool, time.Time, error) {
	ok, at, err := f.Store.Complete(ctx, p)
	if err == nil && ok && f.failed.CompareAndSwap(false, true) {
		return false, time.Time{}, errors.New("connection reset while reading the reply")
	}
	return ok, at, err
}

func TestCommitWhoseReplyWasLostCountsAsCommitted(t *testing.T) {
	t.Parallel()
	st := &flakyStore{Store: memstore.New()}
	g, err := idemguard.New(idemguard.Config{Store: st, Secret: secret})
	require.NoError(t, err)
	defer g.Close(context.Background())
	var runs atomic.Int32
	r, err := g.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1}, okOp(&runs))
	require.NoError(t, err)
	require.True(t, st.failed.Load())
	require.False(t, r.LostClaim, "the retry found our own commit")
	require.False(t, r.CompletedAt.IsZero())
}

// hungUpStore fails the first Complete without applying it, after the
// caller hung up (cancel), and records whether the commit's re-read of
// the row then ran on a context that had ended.
type hungUpStore struct {
	*memstore.Store
	cancel     context.CancelFunc
	failed     atomic.Bool
	readEnded  atomic.Bool
	readsAfter atomic.Int32
}

func (s *hungUpStore) Complete(ctx context.Context, p store.CompleteParams) (bool, time.Time, error) {
	if s.failed.CompareAndSwap(false, true) {
		s.cancel()
		return false, time.Time{}, errors.New("connection reset before the statement was sent")
	}
	return s.Store.Complete(ctx, p)
}

func (s *hungUpStore) Get(ctx context.Context, tenant, scope, keyHash string) (store.Record, error) {
	if s.failed.Load() {
		s.readsAfter.Add(1)
		if ctx.Err() != nil {
			s.readEnded.Store(true)
		}
	}
	return s.Store.Get(ctx, tenant, scope, keyHash)
}

// A commit that failed re-reads the row, and pauses, detached from the
// caller who hung up meanwhile: the outcome is recorded all the same.
func TestCommitRereadOutlivesTheCaller(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &hungUpStore{Store: memstore.New(), cancel: cancel}
	g, err := idemguard.New(idemguard.Config{Store: st, Secret: secret})
	require.NoError(t, err)
	defer g.Close(context.Background())
	var runs atomic.Int32
	r, err := g.Do(ctx, idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1}, okOp(&runs))
	require.NoError(t, err)
	require.True(t, st.failed.Load())
	require.NotZero(t, st.readsAfter.Load(), "the failed commit re-read the row")
	require.False(t, st.readEnded.Load(), "the re-read ran on the caller's ended context")
	require.False(t, r.CompletedAt.IsZero())
	require.EqualValues(t, 1, runs.Load())
}

// holdKey starts a call of tenant acme, scope s, inputs 1 whose operation runs until release
// (or the test's end), and returns once it runs; done closes when that call has returned.
func holdKey(t *testing.T, g *idemguard.Guard) (release func(), done <-chan struct{}) {
	t.Helper()
	unblock, started, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		_, _ = g.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1},
			func(context.Context) (any, error) { close(started); <-unblock; return map[string]any{"ok": true}, nil })
	}()
	release = sync.OnceFunc(func() { close(unblock) })
	t.Cleanup(release)
	<-started
	return release, finished
}

func TestWaitStopsWhenTheCallerGivesUp(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *idemguard.Config) { idemguardtest.SetClock(c, time.Now) })
	holdKey(t, b.guard)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	r, err := b.guard.Do(ctx, idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1, Wait: time.Minute},
		func(context.Context) (any, error) { return nil, nil })
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusInProgress, r.Status)
	require.Less(t, time.Since(start), 10*time.Second, "the wait ended with the caller's context")
}

func TestMaxWaitCapsTheWait(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *idemguard.Config) { idemguardtest.SetClock(c, time.Now); c.MaxWait = 100 * time.Millisecond })
	holdKey(t, b.guard)
	start := time.Now()
	r, err := b.guard.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1, Wait: time.Hour},
		func(context.Context) (any, error) { return nil, nil })
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusInProgress, r.Status)
	require.Less(t, time.Since(start), 10*time.Second)
}

func TestResponseStatusCodeValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, err := b.guard.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1},
		func(context.Context) (any, error) {
			return idemguard.Response{StatusCode: 999, Value: map[string]any{"ok": true}}, nil
		})
	require.ErrorIs(t, err, idemguard.ErrInvalidResult)
	require.Equal(t, idemguard.StatusFailed, r.Status)
	require.ErrorContains(t, r.Err, "999")
	r, err = b.guard.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 2},
		func(context.Context) (any, error) { return "not an object", nil })
	require.ErrorIs(t, err, idemguard.ErrInvalidResult)
	require.Equal(t, idemguard.StatusFailed, r.Status)
	require.Equal(t, sanitize.Unknown, r.StopReason, "a programming error is never provider_error")
	require.Equal(t, http.StatusInternalServerError, r.StatusCode)
	// Stored failed and retryable: a corrected deploy runs the key again.
	r, err = b.guard.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 2},
		func(context.Context) (any, error) { return map[string]any{"ok": true}, nil })
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, r.Status)
	require.Equal(t, 2, r.Attempt)
}

func TestWaitIsReportedOncePerCall(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var waits []time.Duration
	b := setup(t, func(c *idemguard.Config) {
		idemguardtest.SetClock(c, time.Now)
		c.Observe = func(e idemguard.Event) {
			if e.Kind == idemguard.EventWaited {
				mu.Lock()
				waits = append(waits, e.Duration)
				mu.Unlock()
			}
		}
	})
	release, done := holdKey(t, b.guard)
	time.AfterFunc(300*time.Millisecond, release)
	r, err := b.guard.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1, Wait: 10 * time.Second},
		func(context.Context) (any, error) { return nil, errors.New("must not run") })
	require.NoError(t, err)
	<-done
	require.Equal(t, idemguard.StatusSucceeded, r.Status)
	require.True(t, r.Cached)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, waits, 1, "one observation per call, however many polls")
	require.GreaterOrEqual(t, waits[0], 250*time.Millisecond)
}

func TestClosedGuardRefusesNewCallsAndReleasesWaiters(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	g, err := idemguard.New(idemguard.Config{Store: st, Secret: secret})
	require.NoError(t, err)
	started := make(chan struct{})
	runDone := make(chan struct{})
	go func() {
		defer close(runDone)
		_, _ = g.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1},
			func(ctx context.Context) (any, error) { close(started); <-ctx.Done(); return nil, ctx.Err() })
	}()
	<-started
	waiter := make(chan idemguard.Result, 1)
	var waiterRan atomic.Bool
	go func() {
		r, _ := g.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1, Wait: time.Hour},
			func(context.Context) (any, error) { waiterRan.Store(true); return nil, errors.New("must not run") })
		waiter <- r
	}()
	time.Sleep(50 * time.Millisecond) // let the waiter poll; Close must release it either way

	closed := make(chan error, 1)
	go func() { closed <- g.Close(context.Background()) }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the waiter's whole wait")
	}
	<-runDone
	r := <-waiter
	require.Equal(t, idemguard.StatusInProgress, r.Status, "a waiter answers in_progress when the guard closes")
	require.False(t, waiterRan.Load(), "a closing guard starts no new execution")
	rows := st.Rows()
	require.Len(t, rows, 1)
	require.Equal(t, 1, rows[0].Attempts, "the cut-off row was not retried during shutdown")

	ran := false
	_, err = g.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 2},
		func(context.Context) (any, error) { ran = true; return map[string]any{"ok": true}, nil })
	require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
	require.ErrorIs(t, err, idemguard.ErrShuttingDown)
	require.False(t, ran)
	require.Len(t, st.Rows(), 1, "nothing claimed after Close")
}
