package faults

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/idemguardtest"
	"github.com/idemguard/idemguard/internal/testdb"
)

// A real error 1213 from the server on the commit and on a
// heartbeat. A test transaction makes a true deadlock with the guard's
// statement: it gap-locks the index entry the statement must insert (after
// the statement has locked the row itself), then asks for the row. InnoDB
// rolls back the lighter transaction — the guard's one-row statement, since
// the test transaction has first updated a ballast table — and answers it
// 1213. On one server the victim still owns its row: the result must be
// stored, nothing may run twice, and a healthy operation is not cancelled.

// deadlocker is the test's side of a deadlock.
type deadlocker struct {
	t   *testing.T
	db  *testdb.Database
	tx  *sqlx.Tx
	won chan error // the final row lock request: nil when the guard's statement was the victim
}

func newDeadlocker(t *testing.T, db *testdb.Database) *deadlocker {
	t.Helper()
	ctx := context.Background()
	_, err := db.DB.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS ballast (id INT PRIMARY KEY, v INT NOT NULL)`)
	require.NoError(t, err)
	_, err = db.DB.ExecContext(ctx, `INSERT IGNORE INTO ballast (id, v)
		WITH RECURSIVE s (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 200) SELECT n, 0 FROM s`)
	require.NoError(t, err)
	tx, err := db.DB.BeginTxx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	// Weight: 200 changed rows, so InnoDB picks the guard's statement as the victim.
	_, err = tx.ExecContext(ctx, `UPDATE ballast SET v = v + 1`)
	require.NoError(t, err)
	return &deadlocker{t: t, db: db, tx: tx, won: make(chan error, 1)}
}

// gapLock locks the gap of index after the row's current entry: the
// statement under test inserts its new entry there. query selects with
// FORCE INDEX and one parameter, the current value.
func (d *deadlocker) gapLock(query string, after any) {
	_, err := d.tx.ExecContext(context.Background(), query, after)
	require.NoError(d.t, err)
}

// close asks for the row the waiting statement holds, completing the cycle.
func (d *deadlocker) close(id uint64) {
	go func() {
		_, err := d.tx.ExecContext(context.Background(), `SELECT id FROM idempotency_keys WHERE id = ? FOR UPDATE`, id)
		d.won <- err
	}()
}

func (d *deadlocker) finish() {
	select {
	case err := <-d.won:
		require.NoError(d.t, err, "the test transaction, not the guard's statement, was the deadlock victim")
	case <-time.After(30 * time.Second):
		d.t.Fatal("no deadlock: the test transaction still waits")
	}
	require.NoError(d.t, d.tx.Rollback())
}

func keyRow(t *testing.T, db *testdb.Database) (id uint64, expires, heartbeat time.Time) {
	t.Helper()
	row := db.DB.QueryRowxContext(context.Background(), `SELECT id, expires_at, heartbeat_at FROM idempotency_keys`)
	require.NoError(t, row.Scan(&id, &expires, &heartbeat))
	return id, expires, heartbeat
}

func TestDeadlockOnCommitStoresTheResult(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var storeErrors atomic.Int32
	g := guard(t, b.db.DB, noCache, func(c *idemguard.Config) {
		c.Observe = func(e idemguard.Event) {
			if e.Kind == idemguard.EventStoreError && e.StoreOp == "commit" {
				storeErrors.Add(1)
			}
		}
	})
	release, started := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	op := func(context.Context) (any, error) {
		runs.Add(1)
		close(started)
		<-release
		return map[string]any{"ok": true, "data": map[string]any{"answer": 42}}, nil
	}
	c := idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: "deadlock-commit", Inputs: 1}
	done := doAsync(t, g, c, op)
	<-started
	id, expires, _ := keyRow(t, b.db)
	d := newDeadlocker(t, b.db)
	// The commit moves expires_at forward: its new entry lands after the current one.
	d.gapLock(`SELECT id FROM idempotency_keys FORCE INDEX (idx_idempotency_expires_at) WHERE expires_at > ? FOR UPDATE`, expires)
	close(release)
	pollUntil(t, 10*time.Second, "the commit to wait for the gap lock", func() bool { return lockWaits(t, b.db) == 1 })
	d.close(id)
	d.finish()

	r := <-done
	require.Equal(t, idemguard.StatusSucceeded, r.Status)
	require.False(t, r.LostClaim, "error 1213 was read as a lost claim")
	require.EqualValues(t, 1, storeErrors.Load(), "the commit met exactly one deadlock")
	again, err := g.Do(context.Background(), c, op)
	require.NoError(t, err)
	require.True(t, again.Cached, "the result was not stored")
	require.Equal(t, string(r.Body), string(asFresh(again.Body)))
	require.EqualValues(t, 1, runs.Load())
	require.Zero(t, rows(t, b.db, "started"))
}

func TestDeadlockOnAHeartbeatDoesNotCancelTheOperation(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var beatErrors atomic.Int32
	g := guard(t, b.db.DB, noCache, func(c *idemguard.Config) {
		idemguardtest.SetHeartbeatEvery(c, time.Second)
		c.Observe = func(e idemguard.Event) {
			if e.Kind == idemguard.EventStoreError && e.StoreOp == "heartbeat" {
				beatErrors.Add(1)
			}
		}
	})
	release, started := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	var cancelled atomic.Bool
	op := func(ctx context.Context) (any, error) {
		runs.Add(1)
		close(started)
		select {
		case <-release:
			return map[string]any{"ok": true}, nil
		case <-ctx.Done():
			cancelled.Store(true)
			return nil, ctx.Err()
		}
	}
	c := idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: "deadlock-heartbeat", Inputs: 1,
		Settings: idemguard.Settings{StaleAfter: 10 * time.Second}}
	done := doAsync(t, g, c, op)
	<-started
	id, _, heartbeat := keyRow(t, b.db) // the first beat is a second away
	d := newDeadlocker(t, b.db)
	// A heartbeat moves heartbeat_at forward: its new (status, heartbeat_at) entry lands after the current one.
	d.gapLock(`SELECT id FROM idempotency_keys FORCE INDEX (idx_idempotency_status_heartbeat)
		WHERE status = 'started' AND heartbeat_at > ? FOR UPDATE`, heartbeat)
	pollUntil(t, 10*time.Second, "a heartbeat to wait for the gap lock", func() bool { return lockWaits(t, b.db) == 1 })
	d.close(id)
	d.finish()
	pollUntil(t, 10*time.Second, "a heartbeat after the deadlock", func() bool {
		_, _, hb := keyRow(t, b.db)
		return hb.After(heartbeat)
	})
	close(release)

	r := <-done
	require.False(t, cancelled.Load(), "a deadlocked heartbeat cancelled a healthy operation")
	require.Equal(t, idemguard.StatusSucceeded, r.Status)
	require.False(t, r.LostClaim)
	require.EqualValues(t, 1, beatErrors.Load(), "the heartbeat met exactly one deadlock")
	require.EqualValues(t, 1, runs.Load())
	require.Equal(t, 0, rows(t, b.db, "started"))
}
