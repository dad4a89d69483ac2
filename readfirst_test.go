package idemguard_test

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

	"github.com/idemguard/idemguard/idemguardtest"
	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
)

// spyStore counts Claim and Get calls and can run a hook right after a Get
// returns (between the read-first SELECT and the claim INSERT).
type spyStore struct {
	store.Store
	claims, gets atomic.Int32
	mu           sync.Mutex
	afterGet     func() // runs once, after the next Get
	getErr       error  // when set, Get fails with it
}

func (s *spyStore) Claim(ctx context.Context, p store.ClaimParams) (uint64, error) {
	s.claims.Add(1)
	return s.Store.Claim(ctx, p)
}

func (s *spyStore) Get(ctx context.Context, tenant, scope, keyHash string) (store.Record, error) {
	s.gets.Add(1)
	s.mu.Lock()
	hook, getErr := s.afterGet, s.getErr
	s.afterGet = nil
	s.mu.Unlock()
	if getErr != nil {
		return store.Record{}, getErr
	}
	rec, err := s.Store.Get(ctx, tenant, scope, keyHash)
	if hook != nil {
		hook()
	}
	return rec, err
}

func (s *spyStore) onNextGet(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.afterGet = f
}

func (s *spyStore) reset() { s.claims.Store(0); s.gets.Store(0) }

type readFirstBundle struct {
	spy   *spyStore
	guard *idemguard.Guard
	// other is a second guard on the same rows (another replica).
	other *idemguard.Guard
	clock *fakeClock
}

// setupReadFirst gives two guards (cache off) on one in-memory store with a
// fake clock; setupReadFirstOn takes the store (and the clock of the guards).
func setupReadFirst(t *testing.T, policy idemguardtest.ReadFirst) *readFirstBundle {
	t.Helper()
	clock := &fakeClock{now: time.Date(2026, 11, 20, 3, 0, 0, 0, time.UTC)}
	return setupReadFirstOn(t, policy, memstore.New(memstore.WithClock(clock.Now)), clock)
}

func setupReadFirstOn(t *testing.T, policy idemguardtest.ReadFirst, st store.Store, clock *fakeClock) *readFirstBundle {
	t.Helper()
	spy := &spyStore{Store: st}
	var now func() time.Time
	if clock != nil {
		now = clock.Now
	}
	newGuard := func(s store.Store) *idemguard.Guard {
		cfg := idemguard.Config{Store: s, Secret: secret, ReplayCacheSize: -1}
		idemguardtest.SetClock(&cfg, now)
		idemguardtest.SetReadFirst(&cfg, policy)
		g, err := idemguard.New(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
		return g
	}
	return &readFirstBundle{spy: spy, guard: newGuard(spy), other: newGuard(st), clock: clock}
}

// onStores runs a read-first case on the in-memory store and on MariaDB
// (committed rows, separate connections; skipped only without a server
// outside CI, see testdb).
func onStores(t *testing.T, policy idemguardtest.ReadFirst, run func(t *testing.T, b *readFirstBundle)) {
	t.Helper()
	t.Run("memstore", func(t *testing.T) {
		t.Parallel()
		run(t, setupReadFirst(t, policy))
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		db := testdb.New(t)
		run(t, setupReadFirstOn(t, policy, mysqlstore.New(db.DB), nil))
	})
}

func keyCall(key string, inputs any) idemguard.Call {
	return idemguard.Call{Tenant: "t1", Scope: "s.readfirst", ClientKey: key, Inputs: inputs}
}

func TestReadFirstReplayIsOneRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy              idemguardtest.ReadFirst
		wantGets, wantClaim int32
	}{
		{idemguardtest.ReadFirstAlways, 1, 0},
		{idemguardtest.ReadFirstClientKey, 1, 0},
		{idemguardtest.ReadFirstNever, 1, 1}, // the INSERT hits 1062, then the read
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			t.Parallel()
			onStores(t, tc.policy, func(t *testing.T, b *readFirstBundle) {
				testReplayIsOneRead(t, b, tc.wantGets, tc.wantClaim)
			})
		})
	}
}

func testReplayIsOneRead(t *testing.T, b *readFirstBundle, wantGets, wantClaim int32) {
	var runs atomic.Int32
	first, err := b.guard.Do(context.Background(), keyCall("k1", map[string]any{"a": 1}), okOp(&runs))
	require.NoError(t, err)
	require.False(t, first.Cached)

	b.spy.reset()
	res, err := b.guard.Do(context.Background(), keyCall("k1", map[string]any{"a": 1}), okOp(&runs))
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.Equal(t, int32(1), runs.Load())
	require.Equal(t, wantGets, b.spy.gets.Load(), "reads")
	require.Equal(t, wantClaim, b.spy.claims.Load(), "claim INSERTs")
}

// The read saw no row; another replica claimed and finished the key before
// this call's INSERT. The INSERT decides: this call replays and never runs.
func TestReadFirstAbsentRowDoesNotGrantOwnership(t *testing.T) {
	t.Parallel()
	onStores(t, idemguardtest.ReadFirstAlways, testAbsentRowDoesNotGrantOwnership)
}

func testAbsentRowDoesNotGrantOwnership(t *testing.T, b *readFirstBundle) {
	var runs atomic.Int32
	b.spy.onNextGet(func() {
		_, err := b.other.Do(context.Background(), keyCall("k1", map[string]any{"a": 1}), okOp(&runs))
		require.NoError(t, err)
	})
	res, err := b.guard.Do(context.Background(), keyCall("k1", map[string]any{"a": 1}), okOp(&runs))
	require.NoError(t, err)
	require.True(t, res.Cached, "the row appeared after the read: a replay, not a second run")
	require.Equal(t, int32(1), runs.Load())
	require.Equal(t, int32(1), b.spy.claims.Load(), "the claim INSERT ran and lost")
}

// The read saw a running claim; it finished before this call's INSERT. The
// claim path reads again for itself and replays the result.
func TestReadFirstStartedRowFallsThroughToTheClaim(t *testing.T) {
	t.Parallel()
	onStores(t, idemguardtest.ReadFirstAlways, testStartedRowFallsThroughToTheClaim)
}

func testStartedRowFallsThroughToTheClaim(t *testing.T, b *readFirstBundle) {
	var runs atomic.Int32
	release, started := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := b.other.Do(context.Background(), keyCall("k1", 1), func(context.Context) (any, error) {
			runs.Add(1)
			close(started)
			<-release
			return map[string]any{"ok": true}, nil
		})
		done <- err
	}()
	<-started
	b.spy.onNextGet(func() { close(release); require.NoError(t, <-done) })
	res, err := b.guard.Do(context.Background(), keyCall("k1", 1), okOp(&runs))
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.Equal(t, int32(1), runs.Load())
}

// A succeeded row that expired is not a replay: the claim path re-claims it
// with a guarded UPDATE and runs the operation again.
func TestReadFirstExpiredRowIsNotReplayed(t *testing.T) {
	t.Parallel()
	b := setupReadFirst(t, idemguardtest.ReadFirstAlways)
	var runs atomic.Int32
	c := keyCall("k1", 1)
	c.Settings.TTL = time.Minute
	_, err := b.guard.Do(context.Background(), c, okOp(&runs))
	require.NoError(t, err)
	b.clock.Advance(2 * time.Minute)
	res, err := b.guard.Do(context.Background(), c, okOp(&runs))
	require.NoError(t, err)
	require.False(t, res.Cached)
	require.Equal(t, int32(2), runs.Load())
}

// A client key reused with other inputs is a mismatch, never a replay of
// the first inputs' answer.
func TestReadFirstOtherFingerprintIsAMismatch(t *testing.T) {
	t.Parallel()
	onStores(t, idemguardtest.ReadFirstAlways, testOtherFingerprintIsAMismatch)
}

func testOtherFingerprintIsAMismatch(t *testing.T, b *readFirstBundle) {
	var runs atomic.Int32
	_, err := b.guard.Do(context.Background(), keyCall("k1", 1), okOp(&runs))
	require.NoError(t, err)
	_, err = b.guard.Do(context.Background(), keyCall("k1", 2), okOp(&runs))
	require.ErrorIs(t, err, idemguard.ErrFingerprintMismatch)
	require.Equal(t, int32(1), runs.Load())
}

// A failed row with attempts left is retried through the guarded UPDATE;
// when another replica retried it between the read and the claim, this call
// finds it running and does not run the operation.
func TestReadFirstFailedRowRetriedByAnotherReplica(t *testing.T) {
	t.Parallel()
	onStores(t, idemguardtest.ReadFirstAlways, testFailedRowRetriedByAnotherReplica)
}

func testFailedRowRetriedByAnotherReplica(t *testing.T, b *readFirstBundle) {
	var runs atomic.Int32
	_, err := b.guard.Do(context.Background(), keyCall("k1", 1), func(context.Context) (any, error) {
		return nil, errors.New("upstream down")
	})
	require.NoError(t, err)

	release, started := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	b.spy.onNextGet(func() {
		go func() {
			_, err := b.other.Do(context.Background(), keyCall("k1", 1), func(context.Context) (any, error) {
				runs.Add(1)
				close(started)
				<-release
				return map[string]any{"ok": true}, nil
			})
			done <- err
		}()
		<-started
	})
	res, err := b.guard.Do(context.Background(), keyCall("k1", 1), okOp(&runs))
	close(release)
	require.NoError(t, <-done)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusInProgress, res.Status)
	require.Equal(t, int32(1), runs.Load(), "only the replica that won the guarded UPDATE ran")
}

func TestReadFirstStoreDownFailsClosed(t *testing.T) {
	t.Parallel()
	b := setupReadFirst(t, idemguardtest.ReadFirstAlways)
	b.spy.getErr = errors.New("connection refused")
	var runs atomic.Int32
	_, err := b.guard.Do(context.Background(), keyCall("k1", 1), okOp(&runs))
	require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
	require.Zero(t, runs.Load())
	require.Zero(t, b.spy.claims.Load(), "nothing claimed after a failed read")
}

// Adaptive: a scope of fresh keys never reads first; a scope of replays
// switches to reading first; when the mix turns fresh again it switches back.
func TestReadFirstAdaptiveFollowsTheMix(t *testing.T) {
	t.Parallel()
	b := setupReadFirst(t, idemguardtest.ReadFirstAdaptive)
	ctx := context.Background()
	var runs atomic.Int32
	for i := range 50 {
		_, err := b.guard.Do(ctx, keyCall(fmt.Sprint("fresh-", i), i), okOp(&runs))
		require.NoError(t, err)
	}
	require.Zero(t, b.spy.gets.Load(), "fresh keys: no read before the claim")
	require.Equal(t, int32(50), b.spy.claims.Load())

	// Replays of those keys: the first few claim first (and hit 1062), then
	// the scope reads first.
	b.spy.reset()
	for i := range 50 {
		res, err := b.guard.Do(ctx, keyCall(fmt.Sprint("fresh-", i), i), okOp(&runs))
		require.NoError(t, err)
		require.True(t, res.Cached)
	}
	claims := b.spy.claims.Load()
	require.Positive(t, claims, "the scope starts claim-first")
	require.Less(t, claims, int32(10), "and switches to read-first after a few replays")
	b.spy.reset()
	for i := range 20 {
		_, err := b.guard.Do(ctx, keyCall(fmt.Sprint("fresh-", i), i), okOp(&runs))
		require.NoError(t, err)
	}
	require.Zero(t, b.spy.claims.Load(), "replays are one read each")

	// Fresh keys again: the share falls and claims come first again.
	b.spy.reset()
	for i := range 50 {
		_, err := b.guard.Do(ctx, keyCall(fmt.Sprint("new-", i), i), okOp(&runs))
		require.NoError(t, err)
	}
	require.Less(t, b.spy.gets.Load(), int32(10), "a fresh mix stops reading first")
	require.Equal(t, int32(100), runs.Load())
}

func TestReadFirstConfigValidation(t *testing.T) {
	t.Parallel()
	cfg := idemguard.Config{Store: memstore.New(), Secret: secret}
	idemguardtest.SetReadFirst(&cfg, "sometimes")
	_, err := idemguard.New(cfg)
	require.ErrorContains(t, err, "read-first")
}
