package cleanup_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard/internal/cleanup"
	"github.com/idemguard/idemguard/internal/cleanup/cleanuptest"
	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/internal/testlog"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type testBundle struct {
	db  *sqlx.DB
	log *testlog.Buffer
	// logger writes JSON lines to log.
	logger *slog.Logger
}

func setup(t *testing.T, rows cleanuptest.Rows) *testBundle {
	t.Helper()
	d := testdb.New(t, testdb.WithPool(mysqlconn.PoolConfig{MaxOpenConns: 8}))
	start := time.Now()
	require.NoError(t, cleanuptest.Seed(t.Context(), d.DB, rows))
	t.Logf("seeded %d rows in %s", rows.Total(), time.Since(start).Round(time.Millisecond))
	var buf testlog.Buffer
	return &testBundle{db: d.DB, log: &buf, logger: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
}

func count(t *testing.T, db *sqlx.DB) int64 {
	t.Helper()
	n, err := cleanuptest.Count(context.Background(), db)
	require.NoError(t, err)
	return n
}

func countWhere(t *testing.T, db *sqlx.DB, where string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.GetContext(context.Background(), &n, `SELECT COUNT(*) FROM idempotency_keys WHERE `+where))
	return n
}

func noSleep(context.Context, time.Duration) {}

// lockRow locks, in tx, the row at offset in expires_at order, and only that row: a locking read
// with OFFSET would lock every row it skipped too.
func lockRow(t *testing.T, db *sqlx.DB, tx *sqlx.Tx, offset int) {
	t.Helper()
	var id uint64
	require.NoError(t, db.GetContext(t.Context(), &id, `SELECT id FROM idempotency_keys ORDER BY expires_at LIMIT 1 OFFSET ?`, offset))
	_, err := tx.ExecContext(t.Context(), `SELECT id FROM idempotency_keys WHERE id = ? FOR UPDATE`, id)
	require.NoError(t, err)
}

// 100,000 expired rows, 1,000 live, 50 started with fresh heartbeats (expired), 50
// stale expired started rows. The dry run reports what the run then deletes, and deletes nothing;
// the run deletes exactly the expired rows, and its count is what left the table.
func TestRunDeletesExactlyTheExpiredRows(t *testing.T) {
	t.Parallel()
	rows := cleanuptest.Rows{Expired: 100_000, Live: 1_000, FreshStarted: 50, StaleStarted: 50}
	b := setup(t, rows)
	ctx := t.Context()
	require.Equal(t, int64(rows.Total()), count(t, b.db))

	dry, err := cleanup.Run(ctx, b.db, cleanup.Options{DryRun: true, Logger: b.logger})
	require.NoError(t, err)
	require.True(t, dry.DryRun)
	require.Equal(t, int64(rows.Deletable()), dry.Deleted, "dry run counts what a run deletes")
	require.Zero(t, dry.Batches)
	require.Equal(t, cleanup.StopDone, dry.Stopped)
	require.Equal(t, int64(rows.Total()), count(t, b.db), "a dry run deletes nothing")

	before := count(t, b.db)
	var batches []cleanup.Batch
	sum, err := cleanup.Run(ctx, b.db, cleanup.Options{Logger: b.logger, Sleep: noSleep,
		OnBatch: func(bt cleanup.Batch) { batches = append(batches, bt) }})
	require.NoError(t, err)
	after := count(t, b.db)
	t.Logf("deleted %d rows in %d batches in %s", sum.Deleted, sum.Batches, sum.Duration)

	require.Equal(t, before-after, sum.Deleted, "the summary counts the rows that left the table")
	require.Equal(t, dry.Deleted, sum.Deleted, "the dry run said the same")
	require.Equal(t, int64(100_050), sum.Deleted)
	require.Equal(t, 101, sum.Batches, "100 full batches of 1000 and one of 50")
	require.Len(t, batches, sum.Batches)
	require.Equal(t, int64(50), batches[100].Deleted)
	require.Equal(t, sum.Deleted, batches[100].Total)
	require.False(t, sum.DryRun)
	require.Equal(t, cleanup.StopDone, sum.Stopped)

	require.Equal(t, int64(rows.Live), countWhere(t, b.db, `expires_at > UTC_TIMESTAMP(6)`), "every live row survives")
	require.Equal(t, int64(rows.FreshStarted), countWhere(t, b.db, `status = 'started'`),
		"every started row with a fresh heartbeat survives, expired or not")
	require.Zero(t, countWhere(t, b.db, `expires_at < UTC_TIMESTAMP(6) AND status <> 'started'`))
	require.Equal(t, int64(rows.Live+rows.FreshStarted), after)

	require.Contains(t, b.log.String(), `"msg":"cleanup: finished"`)
	require.Contains(t, b.log.String(), `"deleted":100050`)

	// Nothing left: a second run deletes nothing and says so.
	sum, err = cleanup.Run(ctx, b.db, cleanup.Options{Logger: b.logger})
	require.NoError(t, err)
	require.Zero(t, sum.Deleted)
	require.Zero(t, sum.Batches)
	require.Equal(t, cleanup.StopDone, sum.Stopped)
}

// Cancelling the run leaves whole batches only, and a rerun finishes the job.
func TestCancelLeavesWholeBatches(t *testing.T) {
	t.Parallel()
	rows := cleanuptest.Rows{Expired: 20_000, Live: 100}
	b := setup(t, rows)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	const batchSize = 1000
	sum, err := cleanup.Run(ctx, b.db, cleanup.Options{BatchSize: batchSize, Logger: b.logger, Sleep: noSleep,
		OnBatch: func(bt cleanup.Batch) {
			if bt.Number == 3 {
				cancel()
			}
		}})
	require.NoError(t, err, "cancelling is not an error")
	require.Equal(t, cleanup.StopCanceled, sum.Stopped)
	require.Equal(t, 3, sum.Batches)
	removed := int64(rows.Total()) - count(t, b.db)
	require.Equal(t, int64(sum.Batches*batchSize), removed, "no partial batch")
	require.Equal(t, removed, sum.Deleted)

	sum, err = cleanup.Run(t.Context(), b.db, cleanup.Options{BatchSize: batchSize, Logger: b.logger, Sleep: noSleep})
	require.NoError(t, err)
	require.Equal(t, cleanup.StopDone, sum.Stopped)
	require.Equal(t, int64(rows.Expired)-removed, sum.Deleted)
	require.Equal(t, int64(rows.Live), count(t, b.db))
}

// A context cancelled during the pause stops the run before the next batch.
func TestCancelDuringPause(t *testing.T) {
	t.Parallel()
	b := setup(t, cleanuptest.Rows{Expired: 3_000})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sum, err := cleanup.Run(ctx, b.db, cleanup.Options{BatchSize: 1000, Logger: b.logger,
		Sleep: func(ctx context.Context, d time.Duration) {
			require.Equal(t, cleanup.DefaultPause, d)
			cancel()
		}})
	require.NoError(t, err)
	require.Equal(t, cleanup.StopCanceled, sum.Stopped)
	require.Equal(t, int64(1000), sum.Deleted)
	require.Equal(t, int64(2000), count(t, b.db))
}

// A statement killed in the middle of a batch (KILL QUERY, as when the server or an operator
// kills it), after it has deleted rows, is rolled back whole by InnoDB: Run reports the error,
// counts only the batches before it, the table holds every row of the killed batch, and a rerun
// finishes.
//
// To kill the statement at a known point, a test-only trigger sleeps when the DELETE reaches the
// 2,500th oldest row: batch 3 has deleted rows 2,001..2,499 by then.
func TestKilledBatchIsRolledBackWhole(t *testing.T) {
	t.Parallel()
	const batchSize = 1000
	rows := cleanuptest.Rows{Expired: 5 * batchSize}
	b := setup(t, rows)
	ctx := t.Context()

	var pauseAt string
	require.NoError(t, b.db.GetContext(ctx, &pauseAt, `SELECT key_hash FROM idempotency_keys ORDER BY expires_at LIMIT 1 OFFSET 2499`))
	_, err := b.db.ExecContext(ctx, `CREATE TRIGGER test_pause_delete BEFORE DELETE ON idempotency_keys FOR EACH ROW
		BEGIN IF OLD.key_hash = '`+pauseAt+`' THEN DO SLEEP(60); END IF; END`)
	require.NoError(t, err)

	type outcome struct {
		sum cleanup.Summary
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		sum, err := cleanup.Run(ctx, b.db, cleanup.Options{BatchSize: batchSize, Logger: b.logger, Sleep: noSleep})
		done <- outcome{sum, err}
	}()

	var victim int64
	require.Eventually(t, func() bool {
		return b.db.GetContext(ctx, &victim, `SELECT id FROM information_schema.processlist
			WHERE db = DATABASE() AND state = 'User sleep'`) == nil
	}, 30*time.Second, 10*time.Millisecond, "batch 3 pauses in the trigger")
	// A dirty read sees what batch 3 has deleted so far, uncommitted.
	dirty, err := b.db.Connx(ctx)
	require.NoError(t, err)
	_, err = dirty.ExecContext(ctx, `SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED`)
	require.NoError(t, err)
	var visible int64
	require.NoError(t, dirty.GetContext(ctx, &visible, `SELECT COUNT(*) FROM idempotency_keys`))
	_, err = dirty.ExecContext(ctx, `SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ`)
	require.NoError(t, err)
	require.NoError(t, dirty.Close())
	require.Equal(t, int64(rows.Total()-2*batchSize-499), visible, "batch 3 had deleted rows 2,001..2,499 when it paused")

	_, err = b.db.ExecContext(ctx, `KILL QUERY ?`, victim)
	require.NoError(t, err)

	var out outcome
	select {
	case out = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its statement was killed")
	}
	var me *mysql.MySQLError
	require.ErrorAs(t, out.err, &me, "the server answered, so the batch was rolled back")
	require.ErrorContains(t, out.err, "cleanup: batch 3 rolled back")
	require.Equal(t, cleanup.StopError, out.sum.Stopped)
	require.Equal(t, 2, out.sum.Batches)
	require.Equal(t, int64(2*batchSize), out.sum.Deleted)
	require.Equal(t, int64(rows.Total()-2*batchSize), count(t, b.db), "batch 3 left nothing half-deleted")

	_, err = b.db.ExecContext(ctx, `DROP TRIGGER test_pause_delete`)
	require.NoError(t, err)
	sum, err := cleanup.Run(ctx, b.db, cleanup.Options{BatchSize: batchSize, Logger: b.logger, Sleep: noSleep})
	require.NoError(t, err)
	require.Equal(t, int64(3*batchSize), sum.Deleted)
	require.Zero(t, count(t, b.db))
}

// A batch that times out waiting for a lock is rolled back by the server and retried; when the
// lock outlives every retry, Run fails having deleted only whole batches.
func TestLockWaitTimeoutRetriesThenFails(t *testing.T) {
	t.Parallel()
	rows := cleanuptest.Rows{Expired: 1_500}
	b := setup(t, rows)
	ctx := t.Context()

	tx, err := b.db.BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	lockRow(t, b.db, tx, 1200)

	var sleeps []time.Duration
	start := time.Now()
	sum, err := cleanup.Run(ctx, b.db, cleanup.Options{BatchSize: 1000, LockWaitTimeout: time.Second, Logger: b.logger,
		Sleep: func(_ context.Context, d time.Duration) { sleeps = append(sleeps, d) }})
	t.Logf("gave up after %s", time.Since(start).Round(time.Millisecond))
	require.ErrorContains(t, err, "batch 2 rolled back 4 times, giving up")
	var me *mysql.MySQLError
	require.ErrorAs(t, err, &me)
	require.Equal(t, uint16(1205), me.Number)
	require.Equal(t, cleanup.StopError, sum.Stopped)
	require.Equal(t, int64(1000), sum.Deleted)
	require.Equal(t, 1, sum.Batches)
	require.Equal(t, int64(500), count(t, b.db), "batch 2 was rolled back whole every time")
	// One pause after batch 1, then a growing pause before each of the 3 retries.
	require.Equal(t, []time.Duration{cleanup.DefaultPause, cleanup.DefaultPause, 2 * cleanup.DefaultPause, 3 * cleanup.DefaultPause}, sleeps)
	require.Equal(t, cleanup.BatchRetries, strings.Count(b.log.String(), `"msg":"cleanup: batch rolled back by the server; retrying"`))

	// Once the lock is gone, a rerun finishes.
	require.NoError(t, tx.Rollback())
	sum, err = cleanup.Run(ctx, b.db, cleanup.Options{Logger: b.logger, Sleep: noSleep})
	require.NoError(t, err)
	require.Equal(t, int64(500), sum.Deleted)
}

// StaleAfter decides which expired started rows have a live owner: a heartbeat two minutes old is
// fresh for 5m (the default) and stale for 1m. A row never heartbeated is judged by started_at.
func TestStaleAfterProtectsLiveOwners(t *testing.T) {
	t.Parallel()
	b := setup(t, cleanuptest.Rows{})
	ctx := t.Context()
	_, err := b.db.ExecContext(ctx, `INSERT INTO idempotency_keys
		(tenant, scope, key_hash, request_fingerprint, status, claim_nonce, created_at, started_at, heartbeat_at, expires_at)
		VALUES
		('t', 's', REPEAT('a', 64), REPEAT('f', 64), 'started', 'n1', UTC_TIMESTAMP(6) - INTERVAL 1 HOUR,
		 UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND),
		('t', 's', REPEAT('b', 64), REPEAT('f', 64), 'started', 'n2', UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE,
		 UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE, NULL, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND),
		('t', 's', REPEAT('c', 64), REPEAT('f', 64), 'succeeded', 'n3', UTC_TIMESTAMP(6),
		 UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) - INTERVAL 1 SECOND)`)
	require.NoError(t, err)

	sum, err := cleanup.Run(ctx, b.db, cleanup.Options{Logger: b.logger, Sleep: noSleep})
	require.NoError(t, err)
	require.Equal(t, int64(1), sum.Deleted, "only the succeeded row goes with the default StaleAfter")
	require.Equal(t, int64(2), countWhere(t, b.db, `status = 'started'`))

	dry, err := cleanup.Run(ctx, b.db, cleanup.Options{DryRun: true, StaleAfter: time.Minute, Logger: b.logger})
	require.NoError(t, err)
	require.Equal(t, int64(2), dry.Deleted)
	sum, err = cleanup.Run(ctx, b.db, cleanup.Options{StaleAfter: time.Minute, Logger: b.logger, Sleep: noSleep})
	require.NoError(t, err)
	require.Equal(t, int64(2), sum.Deleted)
	require.Zero(t, count(t, b.db))
}

// MaxDuration stops the run before the first batch that would start after it.
func TestMaxDuration(t *testing.T) {
	t.Parallel()
	b := setup(t, cleanuptest.Rows{Expired: 10_000})
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	var sleeps []time.Duration
	sum, err := cleanup.Run(t.Context(), b.db, cleanup.Options{BatchSize: 1000, MaxDuration: 25 * time.Second,
		Pause: 4 * time.Second, Logger: b.logger, Now: clock,
		// Each batch "takes" 10s on the fake clock.
		OnBatch: func(cleanup.Batch) { mu.Lock(); now = now.Add(10 * time.Second); mu.Unlock() },
		Sleep:   func(_ context.Context, d time.Duration) { sleeps = append(sleeps, d) }})
	require.NoError(t, err)
	require.Equal(t, cleanup.StopMaxDuration, sum.Stopped)
	require.Equal(t, 3, sum.Batches, "batches start at 0s, 10s and 20s; none at 30s")
	require.Equal(t, int64(3000), sum.Deleted)
	require.Equal(t, 30*time.Second, sum.Duration)
	require.Equal(t, int64(7000), count(t, b.db))
	// The pause never runs past MaxDuration: 4s, 4s, then 0 (no sleep) after the third batch.
	require.Equal(t, []time.Duration{4 * time.Second, 4 * time.Second}, sleeps)
}

// Bad options are refused with a message naming the option, before anything is deleted.
func TestBadOptionsChangeNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, cleanuptest.Rows{Expired: 10})
	for _, tt := range []struct {
		name string
		opts cleanup.Options
		want string
	}{
		{"negative batch", cleanup.Options{BatchSize: -1}, "BatchSize must be between 1 and 100000"},
		{"huge batch", cleanup.Options{BatchSize: cleanup.MaxBatchSize + 1}, "BatchSize must be between 1 and 100000"},
		{"negative max duration", cleanup.Options{MaxDuration: -time.Second}, "MaxDuration must not be negative"},
		{"short stale after", cleanup.Options{StaleAfter: time.Millisecond}, "StaleAfter must be at least 300ms"},
		{"negative lock wait", cleanup.Options{LockWaitTimeout: -time.Second}, "LockWaitTimeout must be between"},
		{"short stats retention", cleanup.Options{StatsRetention: time.Hour}, "StatsRetention must be at least 24h0m0s"},
		{"short audit retention", cleanup.Options{AuditRetention: 90 * time.Minute}, "AuditRetention must be at least 24h0m0s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sum, err := cleanup.Run(t.Context(), b.db, tt.opts)
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, err, "cleanup: ")
			require.Zero(t, sum)
		})
	}
	require.Equal(t, int64(10), count(t, b.db))
}

// The batch DELETE walks idx_idempotency_expires_at from its oldest end, even when nearly every
// row has expired (the worst case for the optimizer's choice), so that a batch locks about
// BatchSize rows, not the table. The dry run's COUNT is a plain read that locks nothing; the
// optimizer may rightly prefer a table scan for it when most rows qualify, so its plan is only
// logged.
func TestDeleteUsesTheExpiresIndex(t *testing.T) {
	t.Parallel()
	b := setup(t, cleanuptest.Rows{Expired: 30_000, Live: 300, FreshStarted: 50, StaleStarted: 50})
	ctx := t.Context()
	_, err := b.db.ExecContext(ctx, `ANALYZE TABLE idempotency_keys`)
	require.NoError(t, err)
	stale := (5 * time.Minute).Microseconds()

	var del map[string]string
	for _, p := range testdb.Explain(t, b.db, mysqlstore.PurgeKeys.BatchSQL(), stale, 1000) {
		t.Logf("delete plan: %v", p)
		if p["table"] == "idempotency_keys" {
			del = p
		} else {
			// The check that the row's claimed event was moved: one
			// unique-key lookup per row.
			require.Equal(t, "uk_idempotency_audit_event_id", p["key"], "subquery plan %v", p)
		}
	}
	require.Equal(t, "idx_idempotency_expires_at", del["key"], "delete plan %v", del)
	require.Equal(t, "range", del["type"], "delete plan %v", del)
	require.NotContains(t, del["Extra"], "filesort", "the index gives the order")
	t.Logf("count plan: %v", explain(t, b.db, mysqlstore.PurgeKeys.CountSQL(), stale))
}

// explain returns the plan of a single-table statement.
func explain(t *testing.T, db *sqlx.DB, query string, args ...any) map[string]string {
	t.Helper()
	plans := testdb.Explain(t, db, query, args...)
	require.Len(t, plans, 1)
	return plans[0]
}

// Run lowers innodb_lock_wait_timeout on its own connection only, and puts it back before the
// connection returns to the pool.
func TestSessionSettingIsRestored(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, testdb.WithPool(mysqlconn.PoolConfig{MaxOpenConns: 1}))
	ctx := t.Context()
	require.NoError(t, cleanuptest.Seed(ctx, d.DB, cleanuptest.Rows{Expired: 10}))
	var global, session int
	require.NoError(t, d.DB.GetContext(ctx, &global, `SELECT @@GLOBAL.innodb_lock_wait_timeout`))
	require.NotEqual(t, 2, global, "the test needs a global value other than the one Run sets")
	_, err := cleanup.Run(ctx, d.DB, cleanup.Options{LockWaitTimeout: 2 * time.Second, Sleep: noSleep,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, d.DB.GetContext(ctx, &session, `SELECT @@SESSION.innodb_lock_wait_timeout`))
	require.Equal(t, global, session)
}

// A database that cannot answer is an error, not a zero count.
func TestClosedPoolIsAnError(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	db, err := mysqlconn.Open(t.Context(), d.DSN, mysqlconn.PoolConfig{MaxOpenConns: 1})
	require.NoError(t, err)
	require.NoError(t, db.Close())
	for _, dry := range []bool{false, true} {
		sum, err := cleanup.Run(t.Context(), db, cleanup.Options{DryRun: dry, Logger: slog.New(slog.DiscardHandler)})
		require.Error(t, err)
		require.NotErrorIs(t, err, context.Canceled)
		require.Equal(t, cleanup.StopError, sum.Stopped)
		require.Zero(t, sum.Deleted)
	}
}

// seedStats inserts one idempotency_stats bucket per hour offset (hours before the current hour),
// each with requests = 1, in one statement (a recursive CTE: MySQL 8 and MariaDB alike).
func seedStats(t *testing.T, db *sqlx.DB, fromHours, toHours int) {
	t.Helper()
	_, err := db.ExecContext(t.Context(), `INSERT INTO idempotency_stats (bucket_start, scope, requests, updated_at)
WITH RECURSIVE h (n) AS (SELECT ? UNION ALL SELECT n + 1 FROM h WHERE n < ?)
SELECT CAST(DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%d %H:00:00') AS DATETIME(6)) - INTERVAL n HOUR, 'cleanup.stats', 1, UTC_TIMESTAMP(6)
FROM h`, fromHours, toHours)
	require.NoError(t, err)
}

// countTable counts the rows of table (a name from this file, never input).
func countTable(t *testing.T, db *sqlx.DB, table string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.GetContext(t.Context(), &n, `SELECT COUNT(*) FROM `+table))
	return n
}

// seedAges seeds, through seed (hours before now, from and to), 30 rows
// of the last 30 hours, kept by every retention the tests use; 50 of 30
// days, kept by the default and pruned by 7 days; 250 past the default 90
// days; and 10 far past.
func seedAges(t *testing.T, db *sqlx.DB, seed func(t *testing.T, db *sqlx.DB, fromHours, toHours int)) {
	t.Helper()
	const day = 24
	seed(t, db, 1, 30)
	seed(t, db, 30*day, 30*day+49)
	seed(t, db, 91*day, 91*day+249)
	seed(t, db, 400*day, 400*day+9)
}

// requireNoneOlderThan90Days requires the time oldestSQL selects to be
// within the default retention.
func requireNoneOlderThan90Days(t *testing.T, db *sqlx.DB, oldestSQL string) {
	t.Helper()
	var oldest, cutoff time.Time
	require.NoError(t, db.GetContext(t.Context(), &oldest, oldestSQL))
	require.NoError(t, db.GetContext(t.Context(), &cutoff, `SELECT UTC_TIMESTAMP(6) - INTERVAL 90 DAY`))
	require.True(t, oldest.After(cutoff), "oldest %s kept past the cutoff %s", oldest, cutoff)
}

func countStats(t *testing.T, db *sqlx.DB) int64 {
	t.Helper()
	return countTable(t, db, "idempotency_stats")
}

// A run stopped while deleting keys leaves the stats buckets for the next run.
func TestStatsPruningWaitsForTheKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, cleanuptest.Rows{Expired: 300})
	seedStats(t, b.db, 100*24, 100*24+9)
	now := time.Now()
	sum, err := cleanup.Run(t.Context(), b.db, cleanup.Options{BatchSize: 100, MaxDuration: 15 * time.Second,
		Logger: b.logger, Sleep: noSleep,
		Now:     func() time.Time { return now },
		OnBatch: func(cleanup.Batch) { now = now.Add(10 * time.Second) }})
	require.NoError(t, err)
	require.Equal(t, cleanup.StopMaxDuration, sum.Stopped)
	require.Equal(t, int64(200), sum.Deleted)
	require.Zero(t, sum.StatsDeleted)
	require.Equal(t, int64(10), countStats(t, b.db))
}

// seedAudit inserts one idempotency_audit event per hour offset (hours before now, to the
// microsecond), in one statement.
func seedAudit(t *testing.T, db *sqlx.DB, fromHours, toHours int) {
	t.Helper()
	_, err := db.ExecContext(t.Context(), `INSERT INTO idempotency_audit (event_id, kind, at, tenant, scope, key_hash, attempt)
WITH RECURSIVE h (n) AS (SELECT ? UNION ALL SELECT n + 1 FROM h WHERE n < ?)
SELECT LPAD(HEX(n), 32, '0'), 'replay', UTC_TIMESTAMP(6) - INTERVAL n HOUR, 'acme', 'cleanup.audit', REPEAT('a', 64), 1
FROM h`, fromHours, toHours)
	require.NoError(t, err)
}

func countAudit(t *testing.T, db *sqlx.DB) int64 {
	t.Helper()
	return countTable(t, db, "idempotency_audit")
}

// idempotency_stats buckets older than StatsRetention and idempotency_audit events older than
// AuditRetention (each 90 days by default) are pruned in batches after the keys, each counted
// apart from the other; younger ones stay; the dry run counts them and deletes nothing; a
// negative retention keeps every one, and its dry run counts none. The stats' batch DELETE
// walks the primary key, the audit's idx_idempotency_audit_at.
func TestRowsPastRetentionArePruned(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		seed, seedOther func(t *testing.T, db *sqlx.DB, fromHours, toHours int)
		table, oldest   string // oldest: the column the age is read from
		purge           mysqlstore.Purge
		retention       time.Duration
		planKey         string
		retain          func(o *cleanup.Options, d time.Duration)
		deleted, other  func(s cleanup.Summary) int64
	}{
		{name: "stats", seed: seedStats, seedOther: seedAudit, table: "idempotency_stats", oldest: "bucket_start",
			purge: mysqlstore.PurgeStats, retention: cleanup.DefaultStatsRetention, planKey: "PRIMARY",
			retain:  func(o *cleanup.Options, d time.Duration) { o.StatsRetention = d },
			deleted: func(s cleanup.Summary) int64 { return s.StatsDeleted },
			other:   func(s cleanup.Summary) int64 { return s.AuditDeleted }},
		{name: "audit", seed: seedAudit, seedOther: seedStats, table: "idempotency_audit", oldest: "at",
			purge: mysqlstore.PurgeAudit, retention: cleanup.DefaultAuditRetention, planKey: "idx_idempotency_audit_at",
			retain:  func(o *cleanup.Options, d time.Duration) { o.AuditRetention = d },
			deleted: func(s cleanup.Summary) int64 { return s.AuditDeleted },
			other:   func(s cleanup.Summary) int64 { return s.StatsDeleted }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, cleanuptest.Rows{Expired: 120, Live: 10})
			ctx := t.Context()
			count := func() int64 { return countTable(t, b.db, tc.table) }
			opts := func(d time.Duration) cleanup.Options {
				o := cleanup.Options{Logger: b.logger, Sleep: noSleep}
				tc.retain(&o, d)
				return o
			}
			seedAges(t, b.db, tc.seed)
			tc.seedOther(t, b.db, 100*24, 100*24+4) // counted apart
			require.Equal(t, int64(30+50+250+10), count())
			_, err := b.db.ExecContext(ctx, `ANALYZE TABLE `+tc.table)
			require.NoError(t, err)

			del := explain(t, b.db, tc.purge.BatchSQL(), tc.retention.Microseconds(), 100)
			t.Logf("%s delete plan: %v", tc.name, del)
			require.Equal(t, tc.planKey, del["key"], "%s delete plan %v", tc.name, del)
			require.Equal(t, "range", del["type"], "%s delete plan %v", tc.name, del)
			require.NotContains(t, del["Extra"], "filesort", "the index gives the order")

			dry, err := cleanup.Run(ctx, b.db, cleanup.Options{DryRun: true, Logger: b.logger})
			require.NoError(t, err)
			require.Equal(t, int64(260), tc.deleted(dry))
			require.Equal(t, int64(5), tc.other(dry))
			require.Equal(t, int64(120), dry.Deleted)
			require.Equal(t, int64(340), count(), "the dry run deleted nothing")

			off, err := cleanup.Run(ctx, b.db, opts(-1))
			require.NoError(t, err)
			require.Equal(t, int64(120), off.Deleted)
			require.Equal(t, int64(5), tc.other(off))
			require.Zero(t, tc.deleted(off))
			require.Equal(t, int64(340), count(), "a negative retention keeps every one")
			o := opts(-1)
			o.DryRun = true
			dry, err = cleanup.Run(ctx, b.db, o)
			require.NoError(t, err)
			require.Zero(t, tc.deleted(dry), "nor does its dry run count any")

			var sleeps int
			sum, err := cleanup.Run(ctx, b.db, cleanup.Options{BatchSize: 100, Logger: b.logger,
				Sleep: func(context.Context, time.Duration) { sleeps++ }})
			require.NoError(t, err)
			require.Equal(t, cleanup.StopDone, sum.Stopped)
			require.Equal(t, int64(260), tc.deleted(sum))
			require.Zero(t, tc.other(sum))
			require.Equal(t, 2, sleeps, "batches of 100, 100, 60: a pause after each full one")
			require.Equal(t, int64(80), count())
			requireNoneOlderThan90Days(t, b.db, `SELECT MIN(`+tc.oldest+`) FROM `+tc.table)
			require.Contains(t, b.log.String(), fmt.Sprintf(`"%s_deleted":260`, tc.name), "the finish log counts them")

			sum, err = cleanup.Run(ctx, b.db, opts(7*24*time.Hour))
			require.NoError(t, err)
			require.Equal(t, int64(50), tc.deleted(sum))
			require.Equal(t, int64(30), count())
		})
	}
}

// A run stopped while deleting keys leaves the audit events for the next run; MaxDuration also
// stops the audit batches between two of them.
func TestAuditPruningWaitsForTheKeysAndHonoursMaxDuration(t *testing.T) {
	t.Parallel()
	b := setup(t, cleanuptest.Rows{Expired: 300})
	seedAudit(t, b.db, 100*24, 100*24+299)
	now := time.Now()
	opts := cleanup.Options{BatchSize: 100, MaxDuration: 15 * time.Second, Logger: b.logger, Sleep: noSleep,
		Now:     func() time.Time { return now },
		OnBatch: func(cleanup.Batch) { now = now.Add(10 * time.Second) }}
	sum, err := cleanup.Run(t.Context(), b.db, opts)
	require.NoError(t, err)
	require.Equal(t, cleanup.StopMaxDuration, sum.Stopped)
	require.Equal(t, int64(200), sum.Deleted)
	require.Zero(t, sum.AuditDeleted)
	require.Equal(t, int64(300), countAudit(t, b.db))

	// Keys done; the audit phase's time runs out after two batches (the clock moves on each
	// sleep between batches here, as OnBatch reports key batches only).
	now = time.Now()
	opts.OnBatch = nil
	opts.Sleep = func(context.Context, time.Duration) { now = now.Add(10 * time.Second) }
	sum, err = cleanup.Run(t.Context(), b.db, opts)
	require.NoError(t, err)
	require.Equal(t, cleanup.StopMaxDuration, sum.Stopped)
	require.Equal(t, int64(100), sum.Deleted)
	require.Equal(t, int64(100), sum.AuditDeleted, "one batch, a pause past MaxDuration, no second batch")
	require.Equal(t, int64(200), countAudit(t, b.db))
}

// An expired key whose row carries its claimed audit event (store.ClaimParams.Audit) is deleted
// only with its event moved to idempotency_audit, so the key's history keeps its claim after the
// key is gone; a row without an event is deleted as before. A row whose event is already in the
// trail (moved by a batch a crash interrupted) is deleted without a second copy. Without the
// move, the claim vanishes with its row: the history check fails.
func TestExpiredKeysKeepTheirClaimedEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, cleanuptest.Rows{Expired: 30, Live: 5})
	ctx := t.Context()
	// Ten expired rows and one live row carry an event; one expired row's event is in the trail.
	_, err := b.db.ExecContext(ctx, `UPDATE idempotency_keys SET claim_event_id = LPAD(HEX(id), 32, 'c'),
  claimed_by = CONCAT('key:', id) WHERE id % 3 = 0`)
	require.NoError(t, err)
	var carrying, expiredCarrying int64
	require.NoError(t, b.db.GetContext(ctx, &carrying, `SELECT COUNT(*) FROM idempotency_keys WHERE claim_event_id IS NOT NULL`))
	require.NoError(t, b.db.GetContext(ctx, &expiredCarrying, `SELECT COUNT(*) FROM idempotency_keys
  WHERE claim_event_id IS NOT NULL AND expires_at < UTC_TIMESTAMP(6)`))
	require.Positive(t, expiredCarrying)
	_, err = b.db.ExecContext(ctx, `INSERT INTO idempotency_audit (event_id, kind, at, tenant, scope, key_hash, attempt, actor)
SELECT claim_event_id, 'claimed', created_at, tenant, scope, key_hash, 1, claimed_by FROM idempotency_keys
WHERE claim_event_id IS NOT NULL AND expires_at < UTC_TIMESTAMP(6) ORDER BY id LIMIT 1`)
	require.NoError(t, err)
	type claim struct {
		ID    string    `db:"claim_event_id"`
		At    time.Time `db:"created_at"`
		Actor string    `db:"claimed_by"`
		Hash  string    `db:"key_hash"`
	}
	var before []claim
	require.NoError(t, b.db.SelectContext(ctx, &before, `SELECT claim_event_id, created_at, claimed_by, key_hash
FROM idempotency_keys WHERE claim_event_id IS NOT NULL AND expires_at < UTC_TIMESTAMP(6) ORDER BY claim_event_id`))

	sum, err := cleanup.Run(ctx, b.db, cleanup.Options{BatchSize: 7, Logger: b.logger, Sleep: noSleep})
	require.NoError(t, err)
	require.Equal(t, int64(30), sum.Deleted)
	require.Equal(t, int64(5), count(t, b.db))

	var after []claim
	require.NoError(t, b.db.SelectContext(ctx, &after, `SELECT event_id AS claim_event_id, at AS created_at,
  actor AS claimed_by, key_hash FROM idempotency_audit WHERE kind = 'claimed' ORDER BY event_id`))
	require.Equal(t, len(before), len(after), "each moved once")
	for i := range before {
		require.Equal(t, before[i].ID, after[i].ID)
		require.Equal(t, before[i].Actor, after[i].Actor)
		require.Equal(t, before[i].Hash, after[i].Hash)
		require.True(t, before[i].At.Equal(after[i].At))
	}
	require.Equal(t, carrying-expiredCarrying, countWhere(t, b.db, "claim_event_id IS NOT NULL"),
		"live rows keep theirs")
}

// The tallies of replays, in-progress answers and conflicts are pruned by their last time with
// the audit events; a tally still counting (its last event recent) stays, however old its first.
func TestAuditTalliesPastRetentionArePruned(t *testing.T) {
	t.Parallel()
	b := setup(t, cleanuptest.Rows{})
	ctx := t.Context()
	_, err := b.db.ExecContext(ctx, `INSERT INTO idempotency_audit_tally
  (tenant, scope, key_hash, kind, attempt, actor, detail, event_id, first_at, last_at, n)
WITH RECURSIVE h (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM h WHERE n < 20)
SELECT 'acme', 's', REPEAT('a', 64), 'replay', 1, CONCAT('key:', n), '', LPAD(HEX(n), 32, '0'),
  UTC_TIMESTAMP(6) - INTERVAL 200 DAY, UTC_TIMESTAMP(6) - INTERVAL IF(n <= 15, 100, 1) DAY, n FROM h`)
	require.NoError(t, err)
	dry, err := cleanup.Run(ctx, b.db, cleanup.Options{DryRun: true, Logger: b.logger})
	require.NoError(t, err)
	require.Equal(t, int64(15), dry.AuditDeleted)
	sum, err := cleanup.Run(ctx, b.db, cleanup.Options{BatchSize: 4, Logger: b.logger, Sleep: noSleep})
	require.NoError(t, err)
	require.Equal(t, int64(15), sum.AuditDeleted)
	require.Equal(t, int64(5), countTable(t, b.db, "idempotency_audit_tally"))
	del := explain(t, b.db, mysqlstore.PurgeAuditTally.BatchSQL(), cleanup.DefaultAuditRetention.Microseconds(), 100)
	t.Logf("tally delete plan: %v", del)
}
