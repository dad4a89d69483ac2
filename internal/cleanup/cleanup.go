// Package cleanup deletes expired idempotency keys in small batches, so that a daily job can
// empty millions of rows without stalling live claims (DESIGN.md §8).
//
// # What is deleted
//
// A row goes when its expires_at has passed by the database clock (UTC_TIMESTAMP(6)), except a
// started row whose heartbeat is younger than its owner's lease (the row's lease_micros) or
// [Options.StaleAfter], whichever is longer: its owner is alive, and
// deleting the row would make the owner's next heartbeat fail and cancel the operation. This is
// the same rule the engine uses to re-claim an expired row (engine.ReclaimExpired).
//
// # How
//
// One statement per batch, autocommit:
//
//	DELETE FROM idempotency_keys
//	WHERE expires_at < UTC_TIMESTAMP(6)
//	  AND NOT (status = 'started' AND COALESCE(heartbeat_at, started_at) >=
//	    UTC_TIMESTAMP(6) - INTERVAL GREATEST(COALESCE(lease_micros, 0), ?) MICROSECOND)
//	ORDER BY expires_at LIMIT ?
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
// a deadlock (1213) was rolled back by the server and is retried a few times; any other error
// ends the run. The session's innodb_lock_wait_timeout is lowered to [Options.LockWaitTimeout]
// so that a batch never holds its locks for the server default of 50 seconds.
//
// The returned [Summary] counts only batches the server confirmed (the sum of RowsAffected). If
// the connection is lost in the middle of a statement, that batch may have committed without a
// reply; the error says so.
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
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/idemguard/idemguard/internal/engine"
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
	// BatchRetries is how many times a batch rolled back by a lock wait timeout (1205) or a
	// deadlock (1213) is tried again before Run gives up.
	BatchRetries = 3
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
	// StaleAfter protects live owners: a started row whose heartbeat (or start, before the first
	// heartbeat) is younger than this is never deleted, expired or not. Defaults to
	// engine.DefaultStaleAfter. Set it to the largest StaleAfter any scope uses.
	StaleAfter time.Duration
	// LockWaitTimeout is the cleanup session's innodb_lock_wait_timeout, rounded up to whole
	// seconds. Defaults to [DefaultLockWaitTimeout].
	LockWaitTimeout time.Duration
	// Logger receives progress and retry logs. Defaults to slog.Default().
	Logger *slog.Logger

	// OnBatch, if set, is called on Run's goroutine after each committed batch (progress,
	// tests, benchmarks).
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
	// Batches is the number of committed DELETE statements that removed at least one row.
	Batches int
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
	o.StaleAfter = cmp.Or(o.StaleAfter, engine.DefaultStaleAfter)
	o.LockWaitTimeout = cmp.Or(o.LockWaitTimeout, DefaultLockWaitTimeout)
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
	case o.StaleAfter < 0 || (o.StaleAfter > 0 && o.StaleAfter < engine.MinStaleAfter):
		return fmt.Errorf("cleanup: StaleAfter must be at least %s (0 for the default %s), got %s", engine.MinStaleAfter, engine.DefaultStaleAfter, o.StaleAfter)
	case o.LockWaitTimeout < 0 || o.LockWaitTimeout > time.Hour:
		return fmt.Errorf("cleanup: LockWaitTimeout must be between 1s and 1h (0 for the default %s), got %s", DefaultLockWaitTimeout, o.LockWaitTimeout)
	}
	return nil
}

// predicate is what an expired, deletable row is. Its one parameter is StaleAfter in
// microseconds.
// A live owner is judged by the longer of its own lease (the row's
// lease_micros, DESIGN §4.7) and StaleAfter.
const predicate = `expires_at < UTC_TIMESTAMP(6)
  AND NOT (status = 'started' AND COALESCE(heartbeat_at, started_at) >=
    UTC_TIMESTAMP(6) - INTERVAL GREATEST(COALESCE(lease_micros, 0), ?) MICROSECOND)`

const (
	// DeleteSQL is one batch. Parameters: StaleAfter in microseconds, batch size.
	DeleteSQL = `DELETE FROM idempotency_keys WHERE ` + predicate + ` ORDER BY expires_at LIMIT ?`
	// CountSQL counts what a run would delete (dry run). Parameter: StaleAfter in microseconds.
	CountSQL = `SELECT COUNT(*) FROM idempotency_keys WHERE ` + predicate
)

// Run deletes expired rows from idempotency_keys in db, batch by batch (see the package
// documentation), and returns what it did. On error the Summary still counts the batches that
// were committed before it, and Stopped is StopError. Cancelling ctx is not an error: Run stops
// between batches and reports StopCanceled.
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
				slog.Int("batches", sum.Batches), slog.Float64("duration_seconds", sum.Duration.Seconds()),
				slog.Bool("dry_run", sum.DryRun), slog.String("stopped", string(reason)))
		}
		return sum, err
	}
	staleMicros := o.StaleAfter.Microseconds()

	if ctx.Err() != nil {
		return finish(StopCanceled, nil)
	}
	if o.DryRun {
		if err := db.GetContext(ctx, &sum.Deleted, CountSQL, staleMicros); err != nil {
			return finish(StopError, fmt.Errorf("cleanup: count expired rows: %w", err))
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

	for {
		if ctx.Err() != nil {
			return finish(StopCanceled, nil)
		}
		if o.MaxDuration > 0 && o.Now().Sub(start) >= o.MaxDuration {
			return finish(StopMaxDuration, nil)
		}
		n, err := deleteBatch(ctx, conn, o, staleMicros, sum.Batches+1)
		if err != nil {
			return finish(StopError, err)
		}
		if n == 0 {
			return finish(StopDone, nil)
		}
		sum.Batches++
		sum.Deleted += n
		o.Logger.DebugContext(ctx, "cleanup: batch committed", slog.Int("batch", sum.Batches),
			slog.Int64("deleted", n), slog.Int64("total", sum.Deleted))
		if o.OnBatch != nil {
			o.OnBatch(Batch{Number: sum.Batches, Deleted: n, Total: sum.Deleted})
		}
		if n < int64(o.BatchSize) {
			// The statement found fewer deletable rows than it was allowed to take: none left.
			return finish(StopDone, nil)
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
// timeout or a deadlock. The statement is not interrupted by ctx (see the package
// documentation); ctx only stops the retries.
func deleteBatch(ctx context.Context, conn *sqlx.Conn, o Options, staleMicros int64, number int) (int64, error) {
	var lastErr error
	for try := range BatchRetries + 1 {
		if try > 0 {
			o.Logger.WarnContext(ctx, "cleanup: batch rolled back by the server; retrying",
				slog.Int("batch", number), slog.Int("try", try+1), slog.Any("err", lastErr))
			o.Sleep(ctx, max(o.Pause, DefaultPause)*time.Duration(try))
			if ctx.Err() != nil {
				return 0, fmt.Errorf("cleanup: batch %d rolled back (%w), and the run was cancelled before a retry", number, lastErr)
			}
		}
		n, err := execBatch(ctx, conn, o, staleMicros)
		if err == nil {
			return n, nil
		}
		lastErr = err
		var me *mysql.MySQLError
		if !errors.As(err, &me) {
			return 0, fmt.Errorf("cleanup: batch %d: no answer from the database (%w); "+
				"the batch may or may not have committed, and the summary counts only confirmed batches", number, err)
		}
		if me.Number != errLockWaitTimeout && me.Number != errDeadlock {
			return 0, fmt.Errorf("cleanup: batch %d rolled back: %w", number, err)
		}
	}
	return 0, fmt.Errorf("cleanup: batch %d rolled back %d times, giving up: %w", number, BatchRetries+1, lastErr)
}

func execBatch(ctx context.Context, conn *sqlx.Conn, o Options, staleMicros int64) (int64, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), batchTimeout)
	defer cancel()
	res, err := conn.ExecContext(sctx, DeleteSQL, staleMicros, o.BatchSize)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
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
