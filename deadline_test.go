package idemguard

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type ctxKey struct{}

// A write's context keeps the caller's values and none of its
// cancellation, never outlives StoreTimeout, and ends as a timeout does:
// Err, context.Cause and a child context all say DeadlineExceeded.
func TestWriteCtxIsDetachedAndBoundedByStoreTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	g := newTestGuard(t, Config{StoreTimeout: timeout})
	caller, hangUp := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "trace-1"))
	sent := time.Now()
	ctx, cancel := g.writeCtx(caller)
	got := time.Now()
	defer cancel()
	hangUp()

	require.Equal(t, "trace-1", ctx.Value(ctxKey{}), "the caller's values")
	require.NoError(t, ctx.Err(), "the caller hung up: the write goes on")
	require.NoError(t, context.Cause(ctx))
	deadline, ok := ctx.Deadline()
	require.True(t, ok)
	require.False(t, deadline.After(got.Add(timeout)), "never later than StoreTimeout after it was sent")
	require.True(t, deadline.After(sent.Add(timeout-timeout/100-time.Millisecond)), "at most the share window earlier")

	child, stop := context.WithCancel(ctx)
	defer stop()
	select {
	case <-child.Done():
	case <-time.After(20 * timeout):
		t.Fatal("the write's context did not end at its deadline")
	}
	require.ErrorIs(t, ctx.Err(), context.DeadlineExceeded)
	require.ErrorIs(t, context.Cause(ctx), context.DeadlineExceeded)
	require.ErrorIs(t, context.Cause(child), context.DeadlineExceeded)

	next, cancelNext := g.writeCtx(caller)
	defer cancelNext()
	require.NoError(t, next.Err(), "a later write gets a deadline of its own")
}
