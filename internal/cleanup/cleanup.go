// Package cleanup deletes expired idempotency keys in small batches, so that a daily job can
// empty millions of rows without stalling live claims.
//
// # What is deleted
//
// A row goes when the staleness rule of package store calls it reclaimable
// (store.Record.Reclaimable): its expires_at has passed by the database clock (UTC_TIMESTAMP(6)),
// and it is not a started row whose owner is within its lease. The lease is the row's own
// (lease_micros) when it has one, else [Options.StaleAfter]. A live owner's row is kept: deleting
// it would make the owner's next heartbeat fail and cancel the operation. It is exactly the rule
// the guard re-claims an expired row by (store.ReclaimExpired): the statement is built from the
// same SQL fragment, and the store conformance case Store/StalenessRuleIsOneDefinition proves it.
//
// # How
//
// One statement per batch, autocommit (mysqlstore.PurgeKeys):
//
//	DELETE FROM idempotency_keys
//	WHERE (expires_at < UTC_TIMESTAMP(6) AND (status <> 'started' OR (status = 'started'
//	  AND COALESCE(heartbeat_at, started_at) < UTC_TIMESTAMP(6) - INTERVAL IF(lease_micros > 0, lease_micros, ?) MICROSECOND)))
//	  AND (claim_event_id IS NULL OR EXISTS (SELECT 1 FROM idempotency_audit a WHERE a.event_id = idempotency_keys.claim_event_id))
//	ORDER BY expires_at LIMIT ?
//
// preceded by the INSERT ... SELECT that moves the claimed audit events those rows carry into
// idempotency_audit (a row carries its claim's event until something overwrites or deletes it,
// store.ClaimParams.Audit), so a key's history keeps its claim after the key is gone. A row whose
// event has not moved is not deleted; the next batch moves it.
//
// walks idx_idempotency_expires_at from its oldest end, locks at most one batch of rows (plus the
// expired rows of live owners it steps over, whose heartbeat UPDATE then waits those
// milliseconds) for a few milliseconds, and commits. [Run] pauses between batches so that claims and replays get the
// server in between, and stops when nothing is left, at [Options.MaxDuration], or when its context
// is cancelled.
//
// # Whole batches only
//
// A DELETE statement is atomic in InnoDB: if it fails (lock wait timeout, deadlock, KILL QUERY,
// server shutdown) every row it had deleted is restored. Run therefore never leaves a partial
// batch. Cancelling Run's context does not interrupt the batch in flight: go-sql-driver answers a
// cancellation by closing the socket, after which the server may still commit the statement and
// the deleted count would be unknown. The batch in flight (milliseconds) finishes, its count is
// added, and Run stops before the next one. A batch that fails with a lock wait timeout (1205) or
// a deadlock (1213) was rolled back by the server and is retried a few times (see [BatchRetries]
// and [DeadlockRetries]); any other error ends the run. The session's innodb_lock_wait_timeout is
// lowered to [Options.LockWaitTimeout] so that a batch never holds its locks for the server
// default of 50 seconds.
//
// The returned [Summary] counts only batches the server confirmed (the sum of RowsAffected). If
// the connection is lost in the middle of a statement, that batch may have committed without a
// reply; the error says so.
//
// # Stats buckets
//
// After the keys, Run prunes idempotency_stats (internal/stats): the hourly counter rows whose
// bucket_start is older than [Options.StatsRetention] (default 90 days), in batches the same way,
// walking the primary key (bucket_start, scope) from its oldest end:
//
//	DELETE FROM idempotency_stats WHERE bucket_start < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
//	ORDER BY bucket_start LIMIT ?
//
// A run stopped early (max duration, cancellation, error) leaves the buckets for the next run.
//
// # Audit trail
//
// Last, Run prunes idempotency_audit (store.AuditEvent), then idempotency_audit_tally (the counted
// replays, in-progress answers and conflicts, by their last time): the events whose at is older
// than [Options.AuditRetention] (default 90 days), in batches the same way, walking
// idx_idempotency_audit_at from its oldest end:
//
//	DELETE FROM idempotency_audit WHERE at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
//	ORDER BY at LIMIT ?
//
// An event outlives the key it describes (a key's history can be read after the key expired) until
// its own retention passes. A run stopped early leaves the events for the next run.
//
// # Multi-primary clusters
//
// On MariaDB Galera (or another certifying multi-primary cluster) a batch that conflicts with a
// concurrent write on another node — a second cleanup run, a claim re-using an expired row — fails
// certification at commit with the same 1213 as a deadlock. It was not applied, so it is retried
// like a deadlock, after a jittered pause so that two runs do not collide again in step.
//
// DELETE ... LIMIT is unsafe for statement-based binary logging: run the server with
// binlog_format ROW (MySQL 8 default) or MIXED (MariaDB default).
package cleanup

import (
	"cmp"
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/mysqlstore"
)

// Defaults for [Options].
const (
	// DefaultBatchSize is how many rows one DELETE removes at most.
	DefaultBatchSize = 1000
	// MaxBatchSize is the largest BatchSize accepted: a larger batch holds its locks long enough
	// to stall live claims, which is what batching is for.
	MaxBatchSize = 100_000
	// DefaultPause is the pause between two batches.
	DefaultPause = 50 * time.Millisecond
	// DefaultLockWaitTimeout is the cleanup session's innodb_lock_wait_timeout.
	DefaultLockWaitTimeout = 5 * time.Second
	// BatchRetries is how many times a batch rolled back by a lock wait timeout (1205) is tried
	// again before Run gives up.
	BatchRetries = 3
	// DeadlockRetries is how many times a batch rolled back as a deadlock victim, or for a failed
	// certification on a multi-primary cluster (both 1213), is tried again before Run gives up.
	// More than BatchRetries: every 1213 means another writer committed, so the database as a
	// whole made progress, and two cleanup runs on two nodes lose to each other in turn.
	DeadlockRetries = 10
	// DefaultStatsRetention is how long idempotency_stats buckets are kept: 90 days.
	DefaultStatsRetention = 90 * 24 * time.Hour
	// MinStatsRetention is the shortest StatsRetention accepted: `idemguard stats --since 24h`
	// must find its buckets.
	MinStatsRetention = 24 * time.Hour
	// DefaultAuditRetention is how long idempotency_audit events are kept: 90 days.
	DefaultAuditRetention = 90 * 24 * time.Hour
	// MinAuditRetention is the shortest AuditRetention accepted: a trail kept for less than a
	// day is a typo (90m for 90d), not a policy.
	MinAuditRetention = 24 * time.Hour
	// batchTimeout bounds one DELETE on the client side. It is a last resort: when it fires the
	// driver closes the connection and the batch's outcome is unknown.
	batchTimeout = time.Minute
)

// MySQL error numbers after which the server has rolled the statement back and a retry is safe.
const (
	errLockWaitTimeout = 1205
	errDeadlock        = 1213
)

// Options configure [Run]. The zero value is valid: every zero field takes its default.
type Options struct {
	// BatchSize is how many rows one DELETE removes at most. Defaults to [DefaultBatchSize];
	// at most [MaxBatchSize].
	BatchSize int
	// MaxDuration stops the run before the first batch that would start after it. Zero means no
	// limit. The batch in flight always finishes.
	MaxDuration time.Duration
	// Pause is the wait between two batches. Defaults to [DefaultPause]; negative means no pause.
	Pause time.Duration
	// DryRun counts the rows a run would delete and deletes nothing.
	DryRun bool
	// StaleAfter is the lease of a started row that carries none (rows written before leases were
	// stored): such a row whose heartbeat (or start, before the first heartbeat) is younger than
	// this is never deleted, expired or not. A row with its own lease is judged by that lease, as
	// the guard judges it. Defaults to idemguard.DefaultStaleAfter. Set it to the largest
	// StaleAfter any scope uses.
	StaleAfter time.Duration
	// StatsRetention is how long idempotency_stats buckets are kept: a bucket whose hour started
	// longer ago than this is deleted. Defaults to [DefaultStatsRetention]; at least
	// [MinStatsRetention]; negative keeps every bucket.
	StatsRetention time.Duration
	// AuditRetention is how long idempotency_audit events are kept: an event whose at is older
	// than this is deleted. Defaults to [DefaultAuditRetention]; at least [MinAuditRetention];
	// negative keeps every event.
	AuditRetention time.Duration
	// LockWaitTimeout is the cleanup session's innodb_lock_wait_timeout, rounded up to whole
	// seconds. Defaults to [DefaultLockWaitTimeout].
	LockWaitTimeout time.Duration
	// Logger receives progress and retry logs. Defaults to slog.Default().
	Logger *slog.Logger

	// OnBatch, if set, is called on Run's goroutine after each committed batch of
	// idempotency_keys (progress, tests, benchmarks); stats batches are not reported.
	OnBatch func(Batch)
	// Sleep waits d or until ctx is done. Defaults to a timer. For tests.
	Sleep func(ctx context.Context, d time.Duration)
	// Now is the clock MaxDuration and Summary.Duration are measured with. Defaults to time.Now.
	// It never decides which row is expired: that is the database clock.
	Now func() time.Time
}

// Batch describes one committed batch, for [Options.OnBatch].
type Batch struct {
	// Number counts batches from 1.
	Number int
	// Deleted is the number of rows this batch removed.
	Deleted int64
	// Total is the number of rows removed so far, this batch included.
	Total int64
}

// StopReason says why a run ended.
type StopReason string

// The reasons a run ends.
const (
	StopDone        StopReason = "done"         // no expired row left (or a dry run counted them)
	StopMaxDuration StopReason = "max_duration" // Options.MaxDuration reached; rows may remain
	StopCanceled    StopReason = "canceled"     // the context was cancelled; rows may remain
	StopError       StopReason = "error"        // a database error; Run's error says which
)

// Summary is the outcome of a run.
type Summary struct {
	// Deleted is the number of rows removed: the sum of the server's RowsAffected over the
	// committed batches. In a dry run, the number of rows a run would delete now.
	Deleted int64
	// Batches is the number of committed DELETE statements on idempotency_keys that removed at
	// least one row.
	Batches int
	// StatsDeleted is the number of idempotency_stats and idempotency_savings buckets removed
	// (past StatsRetention). In a dry run, the number a run would remove now.
	StatsDeleted int64
	// AuditDeleted is the number of idempotency_audit events and idempotency_audit_tally rows
	// removed (past AuditRetention). In a dry run, the number a run would remove now.
	AuditDeleted int64
	// Duration is the run's wall time.
	Duration time.Duration
	// DryRun echoes Options.DryRun.
	DryRun bool
	// Stopped says why the run ended.
	Stopped StopReason
}

func (o Options) withDefaults() Options {
	o.BatchSize = cmp.Or(o.BatchSize, DefaultBatchSize)
	o.Pause = cmp.Or(o.Pause, DefaultPause)
	o.StaleAfter = cmp.Or(o.StaleAfter, idemguard.DefaultStaleAfter)
	o.LockWaitTimeout = cmp.Or(o.LockWaitTimeout, DefaultLockWaitTimeout)
	o.StatsRetention = cmp.Or(o.StatsRetention, DefaultStatsRetention)
	o.AuditRetention = cmp.Or(o.AuditRetention, DefaultAuditRetention)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Validate reports the first option out of range, naming it.
func (o Options) Validate() error {
	switch {
	case o.BatchSize < 0 || o.BatchSize > MaxBatchSize:
		return fmt.Errorf("cleanup: BatchSize must be between 1 and %d (0 for the default %d), got %d", MaxBatchSize, DefaultBatchSize, o.BatchSize)
	case o.MaxDuration < 0:
		return fmt.Errorf("cleanup: MaxDuration must not be negative (0 for no limit), got %s", o.MaxDuration)
	case o.StaleAfter < 0 || (o.StaleAfter > 0 && o.StaleAfter < idemguard.MinStaleAfter):
		return fmt.Errorf("cleanup: StaleAfter must be at least %s (0 for the default %s), got %s", idemguard.MinStaleAfter, idemguard.DefaultStaleAfter, o.StaleAfter)
	case o.StatsRetention > 0 && o.StatsRetention < MinStatsRetention:
		return fmt.Errorf("cleanup: StatsRetention must be at least %s (0 for the default %s, negative to keep every bucket), got %s",
			MinStatsRetention, DefaultStatsRetention, o.StatsRetention)
	case o.AuditRetention > 0 && o.AuditRetention < MinAuditRetention:
		return fmt.Errorf("cleanup: AuditRetention must be at least %s (0 for the default %s, negative to keep every event), got %s",
			MinAuditRetention, DefaultAuditRetention, o.AuditRetention)
	case o.LockWaitTimeout < 0 || o.LockWaitTimeout > time.Hour:
		return fmt.Errorf("cleanup: LockWaitTimeout must be between 1s and 1h (0 for the default %s), got %s", DefaultLockWaitTimeout, o.LockWaitTimeout)
	}
	return nil
}

// Run deletes expired rows from idempotency_keys in db, batch by batch (see the package
// documentation), then the idempotency_stats buckets and the idempotency_audit events past their
// retention, and returns what it did. On error the Summary still counts the batches that were committed before it, and Stopped is
// StopError. Cancelling ctx is not an error: Run stops between batches and reports StopCanceled.
//
// db should come from mysqlconn.Open. Run uses one connection of it for the whole run and
// restores that connection's session settings before handing it back.
func Run(ctx context.Context, db *sqlx.DB, opts Options) (Summary, error) {
	if err := opts.Validate(); err != nil {
		return Summary{}, err
	}
	o := opts.withDefaults()
	start := o.Now()
	sum := Summary{DryRun: o.DryRun}
	finish := func(reason StopReason, err error) (Summary, error) {
		sum.Stopped = reason
		sum.Duration = o.Now().Sub(start)
		if err == nil { // an error is logged by whoever handles it
			o.Logger.InfoContext(ctx, "cleanup: finished", slog.Int64("deleted", sum.Deleted),
				slog.Int("batches", sum.Batches), slog.Int64("stats_deleted", sum.StatsDeleted),
				slog.Int64("audit_deleted", sum.AuditDeleted),
				slog.Float64("duration_seconds", sum.Duration.Seconds()),
				slog.Bool("dry_run", sum.DryRun), slog.String("stopped", string(reason)))
		}
		return sum, err
	}

	if ctx.Err() != nil {
		return finish(StopCanceled, nil)
	}
	if o.DryRun {
		if err := count(ctx, db, o, &sum); err != nil {
			return finish(StopError, err)
		}
		return finish(StopDone, nil)
	}

	conn, err := db.Connx(ctx)
	if err != nil {
		return finish(StopError, fmt.Errorf("cleanup: get a connection: %w", err))
	}
	lockWait := int64(math.Ceil(o.LockWaitTimeout.Seconds()))
	if _, err := conn.ExecContext(ctx, `SET SESSION innodb_lock_wait_timeout = ?`, lockWait); err != nil {
		discard(conn)
		return finish(StopError, fmt.Errorf("cleanup: set innodb_lock_wait_timeout: %w", err))
	}
	defer restore(conn)

	phases := []phase{{what: "expired keys", purge: mysqlstore.PurgeKeys, param: o.StaleAfter, deleted: &sum.Deleted,
		batches: &sum.Batches, report: true}}
	phases = append(phases, retained(o, &sum)...)
	for _, ph := range phases {
		if reason, err := drain(ctx, conn, o, start, ph); reason != StopDone || err != nil {
			return finish(reason, err)
		}
	}
	return finish(StopDone, nil)
}

// count fills sum with what a run would delete now (a dry run).
func count(ctx context.Context, db *sqlx.DB, o Options, sum *Summary) error {
	var err error
	if sum.Deleted, err = mysqlstore.CountPurgeable(ctx, db, mysqlstore.PurgeKeys, o.StaleAfter); err != nil {
		return fmt.Errorf("cleanup: count expired rows: %w", err)
	}
	for _, ph := range retained(o, sum) {
		n, err := mysqlstore.CountPurgeable(ctx, db, ph.purge, ph.param)
		if err != nil {
			return fmt.Errorf("cleanup: count %s: %w", ph.what, err)
		}
		*ph.deleted += n
	}
	return nil
}

// phase is one table Run empties of what it may delete.
type phase struct {
	what    string           // for logs
	label   string           // prefix of "batch N" in errors: "" for keys (what the summary line counts), "stats ", "audit "
	purge   mysqlstore.Purge // one batch: mysqlstore.DeleteBatch
	param   time.Duration    // the purge's parameter
	deleted *int64
	batches *int
	report  bool // call Options.OnBatch
}

// retained is the phases after the keys: the stats and savings buckets
// older than StatsRetention, the audit events and tallies older than
// AuditRetention. A table whose retention is 0 or less is kept whole and
// has none.
func retained(o Options, sum *Summary) []phase {
	all := []phase{
		{what: "old stats buckets", label: "stats ", purge: mysqlstore.PurgeStats, param: o.StatsRetention,
			deleted: &sum.StatsDeleted, batches: new(int)},
		{what: "old savings buckets", label: "savings ", purge: mysqlstore.PurgeSavings, param: o.StatsRetention,
			deleted: &sum.StatsDeleted, batches: new(int)},
		{what: "old audit events", label: "audit ", purge: mysqlstore.PurgeAudit, param: o.AuditRetention,
			deleted: &sum.AuditDeleted, batches: new(int)},
		{what: "old audit tallies", label: "audit tally ", purge: mysqlstore.PurgeAuditTally, param: o.AuditRetention,
			deleted: &sum.AuditDeleted, batches: new(int)},
	}
	return slices.DeleteFunc(all, func(ph phase) bool { return ph.param <= 0 })
}

// drain runs ph's batches until none is left, MaxDuration, cancellation, or an error.
func drain(ctx context.Context, conn *sqlx.Conn, o Options, start time.Time, ph phase) (StopReason, error) {
	for {
		if ctx.Err() != nil {
			return StopCanceled, nil
		}
		if o.MaxDuration > 0 && o.Now().Sub(start) >= o.MaxDuration {
			return StopMaxDuration, nil
		}
		n, err := deleteBatch(ctx, conn, o, ph, *ph.batches+1)
		if err != nil {
			return StopError, err
		}
		if n == 0 {
			return StopDone, nil
		}
		*ph.batches++
		*ph.deleted += n
		o.Logger.DebugContext(ctx, "cleanup: batch committed", slog.String("what", ph.what),
			slog.Int("batch", *ph.batches), slog.Int64("deleted", n), slog.Int64("total", *ph.deleted))
		if ph.report && o.OnBatch != nil {
			o.OnBatch(Batch{Number: *ph.batches, Deleted: n, Total: *ph.deleted})
		}
		if n < int64(o.BatchSize) {
			// The statement found fewer deletable rows than it was allowed to take: none left.
			return StopDone, nil
		}
		pause := o.Pause
		if o.MaxDuration > 0 {
			pause = min(pause, o.MaxDuration-o.Now().Sub(start))
		}
		if pause > 0 {
			o.Sleep(ctx, pause)
		}
	}
}

// deleteBatch runs one DELETE, retrying it when the server rolled it back for a lock wait
// timeout (up to [BatchRetries] times), or as a deadlock victim or for a failed certification on
// a multi-primary cluster (1213, up to [DeadlockRetries] times). The statement is not interrupted
// by ctx (see the package documentation); ctx only stops the retries.
func deleteBatch(ctx context.Context, conn *sqlx.Conn, o Options, ph phase, number int) (int64, error) {
	for try := 1; ; try++ {
		n, err := execBatch(ctx, conn, o, ph)
		if err == nil {
			return n, nil
		}
		var me *mysql.MySQLError
		if !errors.As(err, &me) {
			return 0, fmt.Errorf("cleanup: %sbatch %d: no answer from the database (%w); "+
				"the batch may or may not have committed, and the summary counts only confirmed batches", ph.label, number, err)
		}
		retries := BatchRetries
		switch me.Number {
		case errLockWaitTimeout:
		case errDeadlock:
			retries = DeadlockRetries
		default:
			return 0, fmt.Errorf("cleanup: %sbatch %d rolled back: %w", ph.label, number, err)
		}
		if try > retries {
			return 0, fmt.Errorf("cleanup: %sbatch %d rolled back %d times, giving up: %w", ph.label, number, try, err)
		}
		o.Logger.WarnContext(ctx, "cleanup: batch rolled back by the server; retrying", slog.String("what", ph.what),
			slog.Int("batch", number), slog.Int("try", try+1), slog.Any("err", err))
		backoff := max(o.Pause, DefaultPause) * time.Duration(try)
		if me.Number == errDeadlock {
			// Jittered: two runs on two nodes of a cluster that conflicted must not retry in step.
			backoff = backoff/2 + rand.N(backoff)
		}
		o.Sleep(ctx, backoff)
		if ctx.Err() != nil {
			return 0, fmt.Errorf("cleanup: %sbatch %d rolled back (%w), and the run was cancelled before a retry", ph.label, number, err)
		}
	}
}

func execBatch(ctx context.Context, conn *sqlx.Conn, o Options, ph phase) (int64, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	return mysqlstore.DeleteBatch(sctx, conn, ph.purge, ph.param, o.BatchSize)
}

// restore puts the session's lock wait timeout back before the connection returns to the pool,
// or discards the connection if that fails.
func restore(conn *sqlx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(ctx, `SET SESSION innodb_lock_wait_timeout = DEFAULT`); err != nil {
		discard(conn)
		return
	}
	_ = conn.Close()
}

// discard closes conn's underlying connection instead of returning it to the pool: database/sql
// drops a connection whose Raw callback returns driver.ErrBadConn.
func discard(conn *sqlx.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
