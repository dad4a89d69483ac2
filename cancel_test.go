package idemguard_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/sanitize"
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
	info, err := b.guard.Lookup(context.Background(), clientKey(t, b.guard, "acme", "pay", "self-cancel"))
	require.NoError(t, err)
	require.Equal(t, 1, info.Attempts)
}
