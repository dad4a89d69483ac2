package faults

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
)

// Claims whose outcome the caller cannot know. No row is ever
// left with a nonce nobody holds; a retry runs the operation once or
// replays it; policy fail never abandons an operation that did not run.

const claimSQL = "INSERT INTO idempotency_keys"

// counting returns an operation that counts its runs.
func counting(runs *atomic.Int32, err error) idemguard.Operation {
	return func(context.Context) (any, error) {
		n := runs.Add(1)
		if err != nil {
			return nil, err
		}
		return map[string]any{"ok": true, "data": map[string]any{"run": n}}, nil
	}
}

// The connection drops right after the claim INSERT was sent: it applied,
// its reply is lost. The row says the claim is ours, so the operation runs.
func TestLostClaimReplyRunsOnce(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	g := guard(t, b.viaProxy, noCache)
	b.proxy.CutAfter(claimSQL, 0)
	var runs atomic.Int32
	c := idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: "lost-claim", Inputs: 1}
	r, err := g.Do(context.Background(), c, counting(&runs, nil))
	require.NoError(t, err)
	require.Equal(t, 1, b.proxy.Cuts())
	require.Equal(t, idemguard.StatusSucceeded, r.Status)
	again, err := g.Do(context.Background(), c, counting(&runs, nil))
	require.NoError(t, err)
	require.True(t, again.Cached)
	require.Equal(t, string(r.Body), string(asFresh(again.Body)))
	require.EqualValues(t, 1, runs.Load())
	require.Zero(t, rows(t, b.db, "started"))
}

// The claim INSERT applies, its reply is lost, and the database stays
// unreachable for longer than the guard may wait: the caller is told
// nothing ran (503). When the database is back, the orphan claim is given
// back; under policy fail the retry runs the operation instead of finding
// it abandoned.
func TestUnsettledClaimIsGivenBackUnderPolicyFail(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	g := guard(t, b.viaProxy, noCache, storeTimeout(500*time.Millisecond))
	b.proxy.CutAfter(claimSQL, 1500*time.Millisecond)
	var runs atomic.Int32
	c := idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: "unsettled", Inputs: 1,
		Settings: idemguard.Settings{StalePolicy: idemguard.StaleFail, StaleAfter: time.Second}}
	_, err := g.Do(context.Background(), c, counting(&runs, nil))
	require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
	require.Zero(t, runs.Load())
	require.Equal(t, 1, rows(t, b.db, "started"), "the INSERT did apply")
	pollUntil(t, 10*time.Second, "the orphan claim to be given back", func() bool { return rows(t, b.db, "") == 0 })

	other := guard(t, b.db.DB)
	time.Sleep(time.Second) // past the lease the orphan claim had: a stale row would now be abandoned
	r, err := other.Do(context.Background(), c, counting(&runs, nil))
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, r.Status, "an operation that never ran was abandoned")
	require.Equal(t, 1, r.Attempt)
	require.EqualValues(t, 1, runs.Load())
}

// The caller hangs up while its claim INSERT waits for a row lock; the
// INSERT then lands. Nothing runs, and no claim is left behind.
func TestCallerHangUpDuringTheClaimLeavesNoClaim(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	g := guard(t, b.db.DB, noCache)
	tx, err := b.db.DB.BeginTxx(context.Background(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	// A next-key lock over the whole (empty) scope: every claim INSERT in it waits.
	_, err = tx.ExecContext(context.Background(), `SELECT id FROM idempotency_keys WHERE tenant = 'acme' AND scope = 's' FOR UPDATE`)
	require.NoError(t, err)

	ctx, hangUp := context.WithCancel(context.Background())
	var runs atomic.Int32
	c := idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: "hang-up", Inputs: 1}
	done := make(chan error, 1)
	go func() {
		_, err := g.Do(ctx, c, counting(&runs, nil))
		done <- err
	}()
	pollUntil(t, 10*time.Second, "the claim to wait for the lock", func() bool { return lockWaits(t, b.db) == 1 })
	hangUp()
	time.Sleep(50 * time.Millisecond) // let a claim bound to the caller's context notice
	require.NoError(t, tx.Rollback())
	err = <-done
	require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
	require.ErrorIs(t, err, context.Canceled)
	pollUntil(t, 10*time.Second, "no statement waiting", func() bool { return lockWaits(t, b.db) == 0 })
	require.Zero(t, rows(t, b.db, ""), "a caller told nothing ran left a claim behind")
	require.Zero(t, runs.Load())

	r, err := g.Do(context.Background(), c, counting(&runs, nil))
	require.NoError(t, err)
	require.Equal(t, 1, r.Attempt)
	require.EqualValues(t, 1, runs.Load())
}

// The retry UPDATE of a failed key applies and its reply is lost: the row
// says the retry is ours, so it runs (attempt 2), once.
func TestLostReclaimReplyRunsOnce(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	g := guard(t, b.viaProxy, noCache)
	var runs atomic.Int32
	c := idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: "lost-reclaim", Inputs: 1}
	first, err := g.Do(context.Background(), c, counting(&runs, errors.New("upstream 500")))
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusFailed, first.Status)
	b.proxy.CutAfter("status = 'started', claim_nonce", 0)
	r, err := g.Do(context.Background(), c, counting(&runs, nil))
	require.NoError(t, err)
	require.Equal(t, 1, b.proxy.Cuts())
	require.Equal(t, idemguard.StatusSucceeded, r.Status)
	require.Equal(t, 2, r.Attempt)
	require.EqualValues(t, 2, runs.Load())
	require.Zero(t, rows(t, b.db, "started"))
}

// The database is blackholed for a second just as the
// operation returns. The commit keeps trying, heartbeats on, while the
// lease holds: the paid-for result is stored and replayed byte for byte.
func TestOneSecondBlackholeAtCommitKeepsTheResult(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	g := guard(t, b.viaProxy, noCache, storeTimeout(150*time.Millisecond))
	var runs atomic.Int32
	c := idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: "blip", Inputs: 1,
		Settings: idemguard.Settings{StaleAfter: 3 * time.Second}}
	r, err := g.Do(context.Background(), c, func(context.Context) (any, error) {
		runs.Add(1)
		b.proxy.Blackhole(time.Second)
		return map[string]any{"ok": true, "data": map[string]any{"text": "paid for", "tokens": 1234}}, nil
	})
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, r.Status)
	require.False(t, r.LostClaim)
	direct := guard(t, b.db.DB)
	again, err := direct.Do(context.Background(), c, counting(&runs, nil))
	require.NoError(t, err)
	require.True(t, again.Cached, "the result was not stored")
	require.Equal(t, string(r.Body), string(asFresh(again.Body)))
	require.EqualValues(t, 1, runs.Load())
}
