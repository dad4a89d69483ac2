package idemguard_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/testkeys"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
)

// Only a recorded cancel gives an attempt back. An operation that reports
// stopReason canceled on its own (it maps its HTTP client's cancellation to
// it) failed like any other: its attempt counts, and MaxAttempts holds.
// Before the fix the commit gave every such attempt back: five calls ran it
// five times with MaxAttempts 1, each as attempt 1.
func TestSelfReportedCancelDoesNotGiveTheAttemptBack(t *testing.T) {
	b := setup(t)
	var runs atomic.Int32
	op := func(context.Context) (any, error) {
		runs.Add(1)
		return nil, &idemguard.OpError{Reason: sanitize.Canceled, Err: errors.New("client: request canceled")}
	}
	call := idemguard.Call{Tenant: "acme", Scope: "pay", ClientKey: "self-cancel", Inputs: map[string]any{"n": 1},
		Settings: idemguard.Settings{MaxAttempts: 1}}
	var results []idemguard.Result
	for range 5 {
		res, err := b.guard.Do(context.Background(), call, op)
		require.NoError(t, err)
		results = append(results, res)
	}
	require.EqualValues(t, 1, runs.Load(), "MaxAttempts 1: the operation runs once")
	for i, res := range results {
		require.Equal(t, idemguard.StatusFailed, res.Status, "call %d", i)
		require.NotEqual(t, sanitize.Canceled, res.StopReason, "call %d: no cancel was recorded", i)
	}
	info, err := b.guard.Lookup(context.Background(), testkeys.Client(t, b.guard, "acme", "pay", "self-cancel"))
	require.NoError(t, err)
	require.Equal(t, 1, info.Attempts)
}

// A cancel recorded on a key whose owner went silent (stale) does not
// make the key run again by itself: a resubmission takes it over (a new,
// counted attempt) under StaleTakeover, and marks it abandoned, for good,
// under StaleFail, as for any stale key. Cancel's documentation said the
// key "runs again when resubmitted" under either policy.
func TestCancelOfAStaleKeyFollowsTheStalePolicy(t *testing.T) {
	for _, policy := range []idemguard.StalePolicy{idemguard.StaleTakeover, idemguard.StaleFail} {
		t.Run(string(policy), func(t *testing.T) {
			b := setup(t)
			call := idemguard.Call{Tenant: "acme", Scope: "job", ClientKey: "silent", Inputs: map[string]any{"n": 1},
				Settings: idemguard.Settings{StaleAfter: time.Minute, StalePolicy: policy, MaxAttempts: 3}}
			started, release := make(chan struct{}), make(chan struct{})
			first := make(chan idemguard.Result, 1)
			go func() {
				res, _ := b.guard.Do(context.Background(), call, func(context.Context) (any, error) {
					close(started)
					<-release // its owner went silent: no heartbeat is due within the test
					return map[string]any{"ok": true}, nil
				})
				first <- res
			}()
			<-started
			b.clock.Advance(2 * time.Minute) // stale on the store's clock
			key := testkeys.Client(t, b.guard, "acme", "job", "silent")
			require.NoError(t, b.guard.Cancel(context.Background(), key), "a stale key is still cancelled")

			var runs atomic.Int32
			res, err := b.guard.Do(context.Background(), call, okOp(&runs))
			require.NoError(t, err)
			if policy == idemguard.StaleTakeover {
				require.Equal(t, idemguard.StatusSucceeded, res.Status)
				require.Equal(t, 2, res.Attempt, "a takeover: the silent attempt counts")
				require.EqualValues(t, 1, runs.Load())
			} else {
				require.Equal(t, idemguard.StatusFailed, res.Status)
				require.Equal(t, sanitize.Abandoned, res.StopReason, "final: a cancel does not undo policy fail")
				require.Zero(t, runs.Load())
			}
			close(release)
			require.True(t, (<-first).LostClaim)
		})
	}
}

// reclaimGate holds a retry's Reclaim after it landed until the test lets
// it go, then hangs up the caller: the claim is released (the caller is
// told nothing ran), and the row is back to the failed attempt before it.
type reclaimGate struct {
	store.Store
	landed, release chan struct{}
	hangUp          context.CancelFunc
}

func (s *reclaimGate) Reclaim(ctx context.Context, p store.ReclaimParams) (bool, error) {
	ok, err := s.Store.Reclaim(ctx, p)
	if ok && p.Kind == store.ReclaimFailed {
		close(s.landed)
		<-s.release
		s.hangUp()
	}
	return ok, err
}

// A watcher that reported a retry's start, whose claim was then given back
// (the row back to the failed attempt before it), ends with that failure,
// and so does a reconnect after the start's ID. Before the fix it ended
// with io.EOF without a final event, and the reconnect too.
func TestWatcherOfAReleasedClaimEndsWithTheFailure(t *testing.T) {
	ms := memstore.New()
	g0, err := idemguard.New(idemguard.Config{Store: ms, Secret: secret})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g0.Close(context.Background())) })
	call := idemguard.Call{Tenant: "acme", Scope: "job", ClientKey: "released", Inputs: map[string]any{"n": 1},
		Settings: idemguard.Settings{MaxAttempts: 3}}
	res, err := g0.Do(context.Background(), call, func(context.Context) (any, error) {
		return nil, &idemguard.OpError{Reason: sanitize.ProviderError, Err: errors.New("upstream down")}
	})
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusFailed, res.Status)

	ctx, hangUp := context.WithCancel(context.Background())
	gate := &reclaimGate{Store: ms, landed: make(chan struct{}), release: make(chan struct{}), hangUp: hangUp}
	g, err := idemguard.New(idemguard.Config{Store: gate, Secret: secret})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
	retried := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, call, func(context.Context) (any, error) { return map[string]any{"ok": true}, nil })
		retried <- err
	}()
	<-gate.landed

	key := testkeys.Client(t, g0, "acme", "job", "released")
	wctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := g0.Watch(wctx, key, "")
	require.NoError(t, err)
	defer w.Close()
	e, err := w.Next(wctx)
	require.NoError(t, err)
	require.Equal(t, idemguard.EventStarted, e.Kind)
	require.Equal(t, 2, e.Attempt)

	close(gate.release)
	require.Error(t, <-retried, "the caller hung up: nothing ran, its claim is given back")
	info, err := g0.Lookup(wctx, key)
	require.NoError(t, err)
	require.Equal(t, store.RowFailed, info.Status)
	require.Equal(t, 1, info.Attempts)

	end, err := w.Next(wctx)
	require.NoError(t, err, "the watcher learns the row's outcome, not io.EOF")
	require.Equal(t, idemguard.EventFailed, end.Kind)
	_, err = w.Next(wctx)
	require.ErrorIs(t, err, io.EOF)

	again, err := g0.Watch(wctx, key, e.ID) // a reconnect after the start
	require.NoError(t, err)
	defer again.Close()
	end, err = again.Next(wctx)
	require.NoError(t, err)
	require.Equal(t, idemguard.EventFailed, end.Kind)
}
