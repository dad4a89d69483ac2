package idemguard_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/faulttest"
	"github.com/idemguard/idemguard/store"
)

// dialRefused is what a store wraps with store.ErrNotSent when the database
// refuses connections.
var dialRefused = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}

// A claim the store proves never reached the database is a known outcome:
// the call answers ErrStoreUnavailable at once, without re-reading the row
// (the re-reads of an unknown outcome would last the whole StoreTimeout
// against a database that is down), and nothing ran.
func TestClaimNotSentAnswersAtOnceWithoutSettling(t *testing.T) {
	t.Parallel()
	var fs *faulttest.Store
	b := setup(t, func(c *idemguard.Config) { fs = faulttest.NewStore(c.Store); c.Store = fs })
	var getsAtClaim atomic.Int32
	fs.Inject(faulttest.OpClaim, faulttest.Fault{
		Before: func(context.Context) { getsAtClaim.Store(int32(fs.Calls(faulttest.OpGet))) },
		Err:    fmt.Errorf("%w: %w", store.ErrNotSent, dialRefused)})
	var runs atomic.Int32
	_, err := b.guard.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1}, okOp(&runs))
	require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
	require.ErrorIs(t, err, store.ErrNotSent)
	var se *idemguard.StoreError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "claim", se.Op)
	require.Equal(t, int(getsAtClaim.Load()), fs.Calls(faulttest.OpGet), "a claim that was never sent was settled by reading the row")
	require.Zero(t, runs.Load())
	require.Empty(t, b.st.Rows())
}

// The same for a guarded reclaim (here the retry of a stored failure).
func TestReclaimNotSentAnswersAtOnceWithoutSettling(t *testing.T) {
	t.Parallel()
	var fs *faulttest.Store
	b := setup(t, func(c *idemguard.Config) { fs = faulttest.NewStore(c.Store); c.Store = fs; c.ReplayCacheSize = -1 })
	call := idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1}
	res, err := b.guard.Do(context.Background(), call, func(context.Context) (any, error) {
		return nil, errors.New("upstream down") // stored failed, retryable
	})
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusFailed, res.Status)
	var getsAtReclaim atomic.Int32
	fs.Inject(faulttest.OpReclaim, faulttest.Fault{
		Before: func(context.Context) { getsAtReclaim.Store(int32(fs.Calls(faulttest.OpGet))) },
		Err:    fmt.Errorf("%w: %w", store.ErrNotSent, dialRefused)})
	var runs atomic.Int32
	_, err = b.guard.Do(context.Background(), call, okOp(&runs))
	require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
	require.ErrorIs(t, err, store.ErrNotSent)
	require.Equal(t, 1, fs.Calls(faulttest.OpReclaim))
	require.Equal(t, int(getsAtReclaim.Load()), fs.Calls(faulttest.OpGet), "a reclaim that was never sent was settled by reading the row")
	require.Zero(t, runs.Load())
}

// A write that may have been sent stays unknown and is settled by the row,
// even if its error also says nothing was sent: here the claim landed and
// its reply was lost, and the call finds its own row and runs exactly once.
func TestNotSentAndUnknownTogetherIsUnknown(t *testing.T) {
	t.Parallel()
	var fs *faulttest.Store
	b := setup(t, func(c *idemguard.Config) { fs = faulttest.NewStore(c.Store); c.Store = fs })
	fs.Inject(faulttest.OpClaim, faulttest.Fault{Apply: true,
		Err: fmt.Errorf("%w: commit: %w", store.ErrOutcomeUnknown, fmt.Errorf("%w: bad connection", store.ErrNotSent))})
	var runs atomic.Int32
	res, err := b.guard.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1}, okOp(&runs))
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.EqualValues(t, 1, runs.Load())
}
