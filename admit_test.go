package idemguard

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/store/memstore"
)

// slots is a Call.Admit with room for max executions; it records how many
// places are held and how many were asked for.
type slots struct {
	max           atomic.Int64
	held, asked   atomic.Int64
	refused, gave atomic.Int64
}

var errFull = errors.New("full")

func (s *slots) admit(string) (func(), error) {
	s.asked.Add(1)
	if s.held.Add(1) > s.max.Load() {
		s.held.Add(-1)
		s.refused.Add(1)
		return nil, errFull
	}
	return func() { s.gave.Add(1); s.held.Add(-1) }, nil
}

// admitRig is a guard whose calls are admitted by slots, and a slow
// operation that holds its execution until release.
type admitRig struct {
	g       *Guard
	s       *slots
	once    sync.Once
	gate    chan struct{}
	running chan struct{}
}

func newAdmitRig(t *testing.T) *admitRig {
	r := &admitRig{s: &slots{}, gate: make(chan struct{}), running: make(chan struct{}, 1)}
	r.g = newTestGuard(t, Config{Store: memstore.New(), ReplayCacheSize: -1})
	r.s.max.Store(1)
	t.Cleanup(r.release) // before the guard closes, also after a failure
	return r
}

func (r *admitRig) release() { r.once.Do(func() { close(r.gate) }) }

func (r *admitRig) call(key string) Call {
	return Call{Tenant: "acme", Scope: "chat", ClientKey: key, Inputs: map[string]any{"k": key}, Admit: r.s.admit}
}

func (r *admitRig) slow(context.Context) (any, error) {
	r.running <- struct{}{}
	<-r.gate
	return map[string]any{"ok": true}, nil
}

// A call refused by Call.Admit writes nothing and runs nothing; a duplicate
// of a running key joins it and a stored answer replays, whatever Admit
// says; the place of an execution is given back when it ends, plain or in
// the background, and a duplicate that lost the claim holds none while it
// waits.
func TestAdmitLimitsExecutionsNotDuplicates(t *testing.T) {
	t.Parallel()
	r := newAdmitRig(t)
	g, s, ctx := r.g, r.s, context.Background()

	// A background execution takes the one place.
	res, err := g.Start(ctx, r.call("a"), r.slow)
	require.NoError(t, err)
	require.True(t, res.Accepted)
	<-r.running
	require.EqualValues(t, 1, s.held.Load())

	// Another key is refused: nothing written, nothing run.
	ran := false
	_, err = g.Do(ctx, r.call("b"), func(context.Context) (any, error) { ran = true; return nil, nil })
	require.ErrorIs(t, err, errFull)
	require.False(t, ran)
	_, err = g.Lookup(ctx, mustKey(t, g, "b"))
	require.ErrorIs(t, err, ErrNotFound, "a refused call wrote a row")

	// Duplicates of the running key join it, at the limit: in progress at
	// once, and within a wait, holding no place while they wait.
	res, err = g.Do(ctx, r.call("a"), r.slow)
	require.NoError(t, err)
	require.Equal(t, StatusInProgress, res.Status)
	waitingDuplicateHoldsNoPlace(t, r)

	// A replay at the limit: taken up by another execution, key a still
	// replays.
	s.max.Store(0)
	res, err = g.Do(ctx, r.call("a"), r.slow)
	require.NoError(t, err)
	require.True(t, res.Cached)

	// A plain execution gives its place back when it ends.
	s.max.Store(1)
	var heldWhileRunning int64
	res, err = g.Do(ctx, r.call("c"), func(context.Context) (any, error) {
		heldWhileRunning = s.held.Load()
		return map[string]any{"ok": true}, nil
	})
	require.NoError(t, err)
	require.EqualValues(t, 1, heldWhileRunning)
	require.Equal(t, StatusSucceeded, res.Status)
	require.Zero(t, s.held.Load())
	require.Equal(t, s.asked.Load()-s.refused.Load(), s.gave.Load(), "every place given was given back once")
}

// waitingDuplicateHoldsNoPlace: with room for it, a waiting duplicate of
// the running key a takes a place for its claim INSERT and gives it back
// when the INSERT finds the running key; once a is released, the
// duplicate gets its answer and the job's place is given back.
func waitingDuplicateHoldsNoPlace(t *testing.T, r *admitRig) {
	ctx, s := context.Background(), r.s
	s.max.Store(2)
	asked := s.asked.Load()
	waited := make(chan Result, 1)
	go func() {
		c := r.call("a")
		c.Wait = 10 * time.Second
		res, err := r.g.Do(ctx, c, r.slow)
		if err != nil {
			t.Error(err)
		}
		waited <- res
	}()
	require.Eventually(t, func() bool { return s.asked.Load() > asked && s.held.Load() == 1 }, 5*time.Second, time.Millisecond,
		"a waiting duplicate holds a place")
	for range 20 { // and keeps holding none while it waits
		require.EqualValues(t, 1, s.held.Load())
		time.Sleep(time.Millisecond)
	}

	r.release()
	res := <-waited
	require.Equal(t, StatusSucceeded, res.Status)
	require.NoError(t, r.g.WaitJobs(ctx))
	require.Eventually(t, func() bool { return s.held.Load() == 0 }, 5*time.Second, time.Millisecond, "the job's place was not given back")
}

func mustKey(t *testing.T, g *Guard, clientKey string) Key {
	t.Helper()
	k, err := g.Key("acme", "chat", clientKey)
	require.NoError(t, err)
	return k
}
