package idemguard

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/faulttest"
	"github.com/idemguard/idemguard/internal/testhooks"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
)

var resettable = Settings{AllowReset: true}

// counting is an operation that answers {"data":{"n":<its run>}}.
func counting(runs *atomic.Int64) Operation {
	return func(context.Context) (any, error) {
		n := runs.Add(1)
		return map[string]any{"ok": true, "data": map[string]any{"n": n}}, nil
	}
}

func resetCall(key string) Call {
	return Call{Tenant: "t1", Scope: "s.reset", ClientKey: key, Inputs: map[string]any{"q": 1}, Settings: resettable}
}

// A reset key is answered as absent and the next call runs it afresh, as
// attempt 1; the trail holds the reset with its actor and the attempt it ended.
func TestResetRunsTheKeyAfresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newTestGuard(t, Config{Audit: AuditConfig{Store: true}})
		var runs atomic.Int64
		ctx := context.Background()
		first, err := g.Do(ctx, resetCall("k1"), counting(&runs))
		require.NoError(t, err)
		key, err := g.Key("t1", "s.reset", "k1")
		require.NoError(t, err)
		info, err := g.Reset(WithActor(ctx, "ops"), key, resettable)
		require.NoError(t, err)
		require.Equal(t, store.RowSucceeded, info.Status)
		require.Equal(t, 1, info.Attempts)
		_, err = g.Lookup(ctx, key)
		require.ErrorIs(t, err, ErrNotFound)
		_, err = g.Reset(ctx, key, resettable)
		require.ErrorIs(t, err, ErrNotFound, "a reset key is absent")

		again, err := g.Do(ctx, resetCall("k1"), counting(&runs))
		require.NoError(t, err)
		require.False(t, again.Cached)
		require.Equal(t, 1, again.Attempt, "attempt 1 of a new life")
		require.NotEqual(t, string(first.Body), string(again.Body))
		require.EqualValues(t, 2, runs.Load())

		require.NoError(t, g.WaitJobs(ctx))
		hist, err := g.History(ctx, key)
		require.NoError(t, err)
		var reset *store.AuditEvent
		for i := range hist {
			if hist[i].Kind == store.AuditReset {
				reset = &hist[i]
			}
		}
		require.NotNil(t, reset, "history: %v", hist)
		require.Equal(t, "ops", reset.Actor)
		require.Equal(t, 1, reset.Attempt)
	})
}

// Each refusal has its answer and changes nothing.
func TestResetRefusalsChangeNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newTestGuard(t, Config{})
		ctx := context.Background()
		var runs atomic.Int64
		_, err := g.Do(ctx, resetCall("done"), counting(&runs))
		require.NoError(t, err)
		done, _ := g.Key("t1", "s.reset", "done")
		before, err := g.Lookup(ctx, done)
		require.NoError(t, err)

		_, err = g.Reset(ctx, done, Settings{})
		require.ErrorIs(t, err, store.ErrResetForbidden)
		other, _ := g.Key("t2", "s.reset", "done")
		_, err = g.Reset(ctx, other, resettable)
		require.ErrorIs(t, err, ErrNotFound, "another tenant's key")
		absent, _ := g.Key("t1", "s.reset", "absent")
		_, err = g.Reset(ctx, absent, resettable)
		require.ErrorIs(t, err, ErrNotFound)
		after, err := g.Lookup(ctx, done)
		require.NoError(t, err)
		require.Equal(t, before, after)

		release := make(chan struct{})
		started := make(chan struct{})
		go func() {
			_, _ = g.Do(ctx, resetCall("running"), func(context.Context) (any, error) {
				close(started)
				<-release
				return nil, nil
			})
		}()
		<-started
		running, _ := g.Key("t1", "s.reset", "running")
		_, err = g.Reset(ctx, running, resettable)
		require.ErrorIs(t, err, store.ErrKeyRunning)
		res, err := g.Do(ctx, Call{Tenant: "t1", Scope: "s.reset", ClientKey: "running", Inputs: map[string]any{"q": 1},
			Settings: resettable, ForceNew: true}, counting(&runs))
		require.NoError(t, err)
		require.Equal(t, StatusInProgress, res.Status, "a forced call on a running key")
		close(release)
		synctest.Wait()
		_, err = g.Do(ctx, Call{Tenant: "t1", Scope: "s.other", ClientKey: "x", Inputs: 1, ForceNew: true}, counting(&runs))
		require.ErrorIs(t, err, store.ErrResetForbidden)
		require.EqualValues(t, 1, runs.Load())
	})
}

// A forced call runs a finished key again under the same key and says what
// it replaced; replays get the new answer; on an absent key it is a first run.
func TestForceNewReplacesTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newTestGuard(t, Config{})
		ctx := context.Background()
		var runs atomic.Int64
		first, err := g.Do(ctx, resetCall("k"), counting(&runs))
		require.NoError(t, err)
		time.Sleep(time.Millisecond) // virtual: the forced call begins after the answer was stored
		forced := resetCall("k")
		forced.ForceNew = true
		res, err := g.Do(ctx, forced, counting(&runs))
		require.NoError(t, err)
		require.True(t, res.Forced)
		require.Equal(t, 1, res.Replaced)
		require.Equal(t, 2, res.Attempt)
		require.NotEqual(t, string(first.Body), string(res.Body))
		replay, err := g.Do(ctx, resetCall("k"), counting(&runs))
		require.NoError(t, err)
		require.True(t, replay.Cached)
		require.False(t, replay.Forced)
		require.Equal(t, res.Envelope.Data, replay.Envelope.Data)

		fresh := resetCall("fresh")
		fresh.ForceNew = true
		res, err = g.Do(ctx, fresh, counting(&runs))
		require.NoError(t, err)
		require.False(t, res.Forced, "an absent key: an ordinary first run")
		require.Equal(t, 1, res.Attempt)
		require.EqualValues(t, 3, runs.Load())
	})
}

// Ten concurrent forced calls of one finished key run the operation once.
func TestConcurrentForcedCallsRunOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		g1 := newTestGuard(t, Config{Store: st})
		g2 := newTestGuard(t, Config{Store: st})
		ctx := context.Background()
		var runs atomic.Int64
		_, err := g1.Do(ctx, resetCall("k"), counting(&runs))
		require.NoError(t, err)
		time.Sleep(time.Millisecond) // virtual: the forced calls begin after the answer was stored
		slow := func(ctx context.Context) (any, error) {
			time.Sleep(100 * time.Millisecond)
			return counting(&runs)(ctx)
		}
		var wg sync.WaitGroup
		var forcedAnswers atomic.Int64
		for i := range 10 {
			wg.Go(func() {
				c := resetCall("k")
				c.ForceNew = true
				res, err := []*Guard{g1, g2}[i%2].Do(ctx, c, slow)
				require.NoError(t, err)
				if res.Forced {
					forcedAnswers.Add(1)
				}
			})
		}
		wg.Wait()
		require.EqualValues(t, 2, runs.Load(), "the first run and one forced run")
		require.EqualValues(t, 1, forcedAnswers.Load())
	})
}

// The cache rule: once a reset (or a forced run) has answered, no replica
// replays the old answer, neither from its replay cache nor from a read
// that raced it. With the rule removed (DefectStaleCache) a replica that
// cached the answer replays it after the reset: this test fails.
func TestNoReplicaReplaysAResetAnswer(t *testing.T) {
	withAndWithoutTheRule(t, func(t *testing.T, defect testhooks.Defect) {
		old := replayedOldAfterReset(t, defect)
		if defect == "" {
			require.Zero(t, old, "replays of the old answer after the reset returned")
		} else {
			require.NotZero(t, old, "the defect must be seen: the test proves the rule")
		}
	})
}

// withAndWithoutTheRule runs check as subtest "rule" with the engine as it is, and as "defect"
// with the reset fence removed (DefectStaleCache), in a synctest bubble each.
func withAndWithoutTheRule(t *testing.T, check func(t *testing.T, defect testhooks.Defect)) {
	for _, tc := range []struct {
		name   string
		defect testhooks.Defect
	}{{"rule", ""}, {"defect", testhooks.DefectStaleCache}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { check(t, tc.defect) })
		})
	}
}

// replayedOldAfterReset caches a key's answer on three guards of one
// store, resets it through one and forces it through another, and counts
// the answers of the first run given after either returned.
func replayedOldAfterReset(t *testing.T, defect testhooks.Defect) int {
	st := memstore.New()
	var guards []*Guard
	for range 3 {
		cfg := Config{Store: st}
		cfg.test.Defect = defect
		guards = append(guards, newTestGuard(t, cfg))
	}
	ctx := context.Background()
	var runs atomic.Int64
	_, err := guards[0].Do(ctx, resetCall("k"), counting(&runs))
	require.NoError(t, err)
	for _, g := range guards {
		for range 2 {
			res, err := g.Do(ctx, resetCall("k"), counting(&runs))
			require.NoError(t, err)
			require.True(t, res.Cached)
		}
	}
	key, _ := guards[0].Key("t1", "s.reset", "k")
	_, err = guards[0].Reset(ctx, key, resettable)
	require.NoError(t, err)
	old := countOld(t, guards, func(n string) bool { return n == "1" })
	time.Sleep(time.Millisecond) // virtual: the forced call begins after the new answer was stored
	forced := resetCall("k")
	forced.ForceNew = true
	res, err := guards[1].Do(ctx, forced, counting(&runs))
	require.NoError(t, err)
	want := fmt.Sprint(res.Envelope.Data["n"])
	return old + countOld(t, guards, func(n string) bool { return n != want })
}

// countOld asks every guard for the key 30 times and counts the answers
// that are old by isOld (the answer's run, as text). A call that runs the
// operation answers with a run number from 1000 on.
func countOld(t *testing.T, guards []*Guard, isOld func(n string) bool) int {
	old := 0
	var runs atomic.Int64
	runs.Store(1000)
	for i := range 30 {
		res, err := guards[i%3].Do(context.Background(), resetCall("k"), counting(&runs))
		require.NoError(t, err)
		if isOld(fmt.Sprint(res.Envelope.Data["n"])) {
			old++
		}
	}
	return old
}

// A read that saw the old answer but returned after a reset had answered
// is not replayed (the second half of the rule): the call reads again and
// runs the key afresh. Without the freshness check it replays the old answer.
func TestReadThatRacedAResetIsNotReplayed(t *testing.T) {
	withAndWithoutTheRule(t, func(t *testing.T, defect testhooks.Defect) {
		st := memstore.New()
		slow := faulttest.NewStore(st)
		cfg := Config{Store: slow, ReplayCacheSize: -1}
		cfg.test.Defect = defect
		g1, g2 := newTestGuard(t, cfg), newTestGuard(t, Config{Store: st})
		ctx := context.Background()
		var runs atomic.Int64
		_, err := g2.Do(ctx, resetCall("k"), counting(&runs))
		require.NoError(t, err)
		resetDone := make(chan struct{})
		slow.Inject(faulttest.OpGet, faulttest.Fault{After: func(context.Context) { <-resetDone }})
		answer := make(chan Result, 1)
		go func() {
			res, err := g1.Do(ctx, resetCall("k"), counting(&runs))
			require.NoError(t, err)
			answer <- res
		}()
		synctest.Wait() // g1's read has seen the old row and is held
		key, _ := g2.Key("t1", "s.reset", "k")
		_, err = g2.Reset(ctx, key, resettable)
		require.NoError(t, err)
		close(resetDone)
		res := <-answer
		if defect == "" {
			require.False(t, res.Cached, "the read that raced the reset was replayed")
			require.EqualValues(t, 2, runs.Load())
		} else {
			require.True(t, res.Cached, "the defect must be seen: the test proves the rule")
		}
	})
}

// A forced call that finds an answer stored after it began (by a forced run that overlapped
// it) is answered with that answer: it does not run the key a third time.
func TestForcedCallDoesNotReplaceAnAnswerStoredSinceItBegan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		slow := faulttest.NewStore(st)
		g1, g2 := newTestGuard(t, Config{Store: slow}), newTestGuard(t, Config{Store: st})
		ctx := context.Background()
		var runs atomic.Int64
		_, err := g2.Do(ctx, resetCall("k"), counting(&runs))
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
		release := make(chan struct{})
		slow.Inject(faulttest.OpClaim, faulttest.Fault{Before: func(context.Context) { <-release }})
		forced := resetCall("k")
		forced.ForceNew = true
		late := make(chan Result, 1)
		go func() {
			res, err := g1.Do(ctx, forced, counting(&runs)) // its claim INSERT is held
			require.NoError(t, err)
			late <- res
		}()
		synctest.Wait()
		won, err := g2.Do(ctx, forced, counting(&runs))
		require.NoError(t, err)
		require.True(t, won.Forced)
		close(release)
		res := <-late
		require.False(t, res.Forced, "a forced call began before the answer it found was stored")
		require.True(t, res.Cached)
		require.Equal(t, won.Envelope.Data, res.Envelope.Data)
		require.EqualValues(t, 2, runs.Load())
	})
}

// A client key whose row was made under a previous secret is reset by a Guard on the new one.
func TestResetFindsAKeyMadeUnderAPreviousSecret(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New()
		old := newTestGuard(t, Config{Store: st})
		g, err := New(Config{Store: st, Secret: []byte("another-secret-0123456789abcdef!!"), SecretID: "new",
			PreviousSecrets: []SecretVersion{{Secret: testSecret}}})
		require.NoError(t, err)
		defer func() { _ = g.Close(context.Background()) }()
		var runs atomic.Int64
		_, err = old.Do(context.Background(), resetCall("k"), counting(&runs))
		require.NoError(t, err)
		key, err := g.Key("t1", "s.reset", "k")
		require.NoError(t, err)
		info, err := g.Reset(context.Background(), key, resettable)
		require.NoError(t, err)
		require.Equal(t, 1, info.Attempts)
		_, err = g.Lookup(context.Background(), key)
		require.ErrorIs(t, err, ErrNotFound)
	})
}

// A claim INSERT and a Reclaim of one round share their nonce; when both are unconfirmed and
// the row holds the nonce, it is the Reclaim's if it is the row that Reclaim took: given back,
// it is restored, never deleted as a fresh INSERT's (which would lose the stored answer and let
// the late INSERT land as a new life). The simulation found it with a forced reclaim (seed 2676).
func TestPendingClaimOfASharedNonceIsTheRowsOwn(t *testing.T) {
	prev := &store.Record{ID: 7, Status: store.RowFailed, ClaimNonce: "old", Attempts: 1}
	insert := pendingClaim{nonce: "n"}
	reclaim := pendingClaim{nonce: "n", guard: "old", prev: prev}
	row := store.Record{ID: 7, Status: store.RowStarted, ClaimNonce: "n", Attempts: 2}
	u, ok := pendingIn([]pendingClaim{insert, reclaim}, row)
	require.True(t, ok)
	require.Same(t, prev, u.prev, "the reclaimed row is the Reclaim's")
	row.ID = 8 // a row the INSERT made
	u, ok = pendingIn([]pendingClaim{insert, reclaim}, row)
	require.True(t, ok)
	require.Nil(t, u.prev)

	st := memstore.New()
	g := newTestGuard(t, Config{Store: st})
	var runs atomic.Int64
	_, err := g.Do(context.Background(), resetCall("k"), counting(&runs))
	require.NoError(t, err)
	held := st.Rows()[0]
	ok, err = st.Reclaim(context.Background(), store.ReclaimParams{Kind: store.ReclaimForced, ID: held.ID,
		OldNonce: held.ClaimNonce, OldAttempts: held.Attempts, NewNonce: "n", TTL: time.Hour, Lease: time.Minute})
	require.NoError(t, err)
	require.True(t, ok)
	p, err := g.prepare(context.Background(), resetCall("k"))
	require.NoError(t, err)
	prevRow := held
	left := g.releaseIfMine(p, []pendingClaim{{nonce: "n", sent: time.Now()}, {nonce: "n", guard: held.ClaimNonce, prev: &prevRow, sent: time.Now()}})
	require.Len(t, left, 1, "the INSERT's claim is left to its window")
	rows := st.Rows()
	require.Len(t, rows, 1, "the row is restored, not deleted")
	require.Equal(t, store.RowSucceeded, rows[0].Status)
	require.Equal(t, held.ClaimNonce, rows[0].ClaimNonce)
}

// startOnly is a StreamWriter that keeps what Begin was told.
type startOnly struct{ start StreamStart }

func (w *startOnly) Begin(s StreamStart) { w.start = s }
func (w *startOnly) Write(Chunk) error   { return nil }

// A forced streamed call's live stream says which attempt it replaces.
func TestForcedStreamNamesTheAttemptItReplaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newTestGuard(t, Config{})
		ctx := context.Background()
		var runs atomic.Int64
		op := StreamOperation{Run: func(ctx context.Context, emit func(Chunk)) (any, error) {
			emit(Chunk{Data: []byte("x")})
			return counting(&runs)(ctx)
		}}
		_, err := g.DoStream(ctx, resetCall("k"), op, &startOnly{})
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
		forced := resetCall("k")
		forced.ForceNew = true
		w := &startOnly{}
		res, err := g.DoStream(ctx, forced, op, w)
		require.NoError(t, err)
		require.True(t, res.Forced)
		require.Equal(t, StreamLive, w.start.Origin)
		require.Equal(t, 1, w.start.Replaced)
	})
}
