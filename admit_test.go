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

// A call refused by Call.Admit writes nothing and runs nothing; a duplicate
// of a running key joins it and a stored answer replays, whatever Admit
// says; the place of an execution is given back when it ends, plain or in
// the background, and a duplicate that lost the claim holds none while it
// waits.
func TestAdmitLimitsExecutionsNotDuplicates(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	g := newTestGuard(t, Config{Store: st, ReplayCacheSize: -1})
	ctx := context.Background()
	s := &slots{}
	s.max.Store(1)
	call := func(key string) Call {
		return Call{Tenant: "acme", Scope: "chat", ClientKey: key, Inputs: map[string]any{"k": key}, Admit: s.admit}
	}
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the guard closes, also after a failure
	running := make(chan struct{}, 1)
	slow := func(context.Context) (any, error) {
		running <- struct{}{}
		<-release
		return map[string]any{"ok": true}, nil
	}

	// A background execution takes the one place.
	res, err := g.Start(ctx, call("a"), slow)
	require.NoError(t, err)
	require.True(t, res.Accepted)
	<-running
	require.EqualValues(t, 1, s.held.Load())

	// Another key is refused: nothing written, nothing run.
	ran := false
	_, err = g.Do(ctx, call("b"), func(context.Context) (any, error) { ran = true; return nil, nil })
	require.ErrorIs(t, err, errFull)
	require.False(t, ran)
	_, err = g.Lookup(ctx, mustKey(t, g, "b"))
	require.ErrorIs(t, err, ErrNotFound, "a refused call wrote a row")

	// Duplicates of the running key join it, at the limit: in progress at
	// once, and within a wait, holding no place while they wait.
	res, err = g.Do(ctx, call("a"), slow)
	require.NoError(t, err)
	require.Equal(t, StatusInProgress, res.Status)
	// With room for it, a waiting duplicate takes a place for its claim
	// INSERT and gives it back when the INSERT finds the running key.
	s.max.Store(2)
	asked := s.asked.Load()
	waited := make(chan Result, 1)
	go func() {
		c := call("a")
		c.Wait = 10 * time.Second
		r, err := g.Do(ctx, c, slow)
		if err != nil {
			t.Error(err)
		}
		waited <- r
	}()
	require.Eventually(t, func() bool { return s.asked.Load() > asked && s.held.Load() == 1 }, 5*time.Second, time.Millisecond,
		"a waiting duplicate holds a place")
	for range 20 { // and keeps holding none while it waits
		require.EqualValues(t, 1, s.held.Load())
		time.Sleep(time.Millisecond)
	}

	once.Do(func() { close(release) })
	r := <-waited
	require.Equal(t, StatusSucceeded, r.Status)
	require.NoError(t, g.WaitJobs(ctx))
	require.Eventually(t, func() bool { return s.held.Load() == 0 }, 5*time.Second, time.Millisecond, "the job's place was not given back")

	// A replay at the limit: taken up by another execution, key a still
	// replays.
	s.max.Store(0)
	res, err = g.Do(ctx, call("a"), slow)
	require.NoError(t, err)
	require.True(t, res.Cached)

	// A plain execution gives its place back when it ends.
	s.max.Store(1)
	var heldWhileRunning int64
	res, err = g.Do(ctx, call("c"), func(context.Context) (any, error) {
		heldWhileRunning = s.held.Load()
		return map[string]any{"ok": true}, nil
	})
	require.NoError(t, err)
	require.EqualValues(t, 1, heldWhileRunning)
	require.Equal(t, StatusSucceeded, res.Status)
	require.Zero(t, s.held.Load())
	require.Equal(t, s.asked.Load()-s.refused.Load(), s.gave.Load(), "every place given was given back once")
}

func mustKey(t *testing.T, g *Guard, clientKey string) Key {
	t.Helper()
	k, err := g.Key("acme", "chat", clientKey)
	require.NoError(t, err)
	return k
}
