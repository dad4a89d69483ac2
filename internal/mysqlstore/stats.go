package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
)

// The figures behind `idemguard stats`, the stats recorder (package
// internal/stats) and the operator page (package internal/opsui): the
// hourly counter tables idempotency_stats (one row per hour and scope) and
// idempotency_savings (one per hour, tenant and scope), and read-only
// aggregates of idempotency_keys. Those packages keep the figures' meaning;
// the statements are here, with every other statement on the tables.

// statsColumns are the counter columns of idempotency_stats.
var statsColumns = []string{"requests", "claims", "retries", "takeovers", "replays", "in_progress",
	"retry_limits", "mismatches", "failures", "lost_claims", "store_errors", "resets"}

// savingsColumns are the counter columns of idempotency_savings.
var savingsColumns = []string{"executions", "avoided_calls", "avoided_prompt_tokens",
	"avoided_completion_tokens", "avoided_cost_nanos"}

// StatsColumns returns the counter columns of idempotency_stats, in the
// order every counter slice of this file follows (a new slice each call).
func StatsColumns() []string { return append([]string(nil), statsColumns...) }

// SavingsColumns returns the counter columns of idempotency_savings, in the
// order every savings slice of this file follows (a new slice each call).
func SavingsColumns() []string { return append([]string(nil), savingsColumns...) }

// SavingsKey names the (tenant, scope) of an idempotency_savings row.
type SavingsKey struct{ Tenant, Scope string }

// ErrNoSuchTable wraps the error of a read whose table does not exist (the
// migrations were not applied).
var ErrNoSuchTable = errors.New("mysqlstore: table does not exist")

const errNoSuchTable = 1146 // ER_NO_SUCH_TABLE

func noSuchTable(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == errNoSuchTable {
		return fmt.Errorf("%w: %w", ErrNoSuchTable, err)
	}
	return err
}

// DBNow reads the database clock, UTC_TIMESTAMP(6).
func DBNow(ctx context.Context, q sqlx.QueryerContext) (time.Time, error) {
	var now time.Time
	err := sqlx.GetContext(ctx, q, &now, `SELECT UTC_TIMESTAMP(6)`)
	return now, err
}

// flushChunk is the most rows one INSERT of AddToCurrentHour writes.
const flushChunk = 500

// AddToCurrentHour adds counts to the buckets of the database clock's
// current hour, in one transaction, so that a failure leaves nothing
// applied: stats per scope (in StatsColumns' order) to idempotency_stats,
// savings per tenant and scope (in SavingsColumns' order) to
// idempotency_savings. Any number of processes add to the same rows.
func AddToCurrentHour(ctx context.Context, db *sqlx.DB, stats map[string][]int64, savings map[SavingsKey][]int64) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	rows := make([][]any, 0, len(stats))
	for scope, c := range stats {
		rows = append(rows, append([]any{scope}, anys(c)...))
	}
	if err := addChunks(ctx, tx, "idempotency_stats", []string{"scope"}, statsColumns, rows); err != nil {
		return fmt.Errorf("add to idempotency_stats: %w", err)
	}
	rows = rows[:0]
	for k, c := range savings {
		rows = append(rows, append([]any{k.Tenant, k.Scope}, anys(c)...))
	}
	if err := addChunks(ctx, tx, "idempotency_savings", []string{"tenant", "scope"}, savingsColumns, rows); err != nil {
		return fmt.Errorf("add to idempotency_savings: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func anys(c []int64) []any {
	out := make([]any, len(c))
	for i, v := range c {
		out[i] = v
	}
	return out
}

func addChunks(ctx context.Context, tx *sqlx.Tx, table string, keys, counters []string, rows [][]any) error {
	for start := 0; start < len(rows); start += flushChunk {
		q, args := addToHour(table, keys, counters, rows[start:min(start+flushChunk, len(rows))])
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return err
		}
	}
	return nil
}

// hourNow is the start of the database clock's current hour.
const hourNow = `DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%d %H:00:00')`

// addToHour is one INSERT adding rows to the current hour's buckets of table: each row holds
// the values of keys, then of counters, and a row that exists already gets the counts added.
// VALUES(col) in ON DUPLICATE KEY UPDATE works on MySQL 8 (deprecated, with a warning) and
// MariaDB alike.
func addToHour(table string, keys, counters []string, rows [][]any) (string, []any) {
	var b strings.Builder
	b.WriteString("INSERT INTO " + table + " (bucket_start, ")
	b.WriteString(strings.Join(append(append([]string(nil), keys...), counters...), ", "))
	b.WriteString(", updated_at) VALUES ")
	row := "(" + hourNow + strings.Repeat(", ?", len(keys)+len(counters)) + ", UTC_TIMESTAMP(6))"
	args := make([]any, 0, len(rows)*(len(keys)+len(counters)))
	for i, r := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
		args = append(args, r...)
	}
	b.WriteString(" ON DUPLICATE KEY UPDATE ")
	for _, col := range counters {
		fmt.Fprintf(&b, "%s = %s + VALUES(%s), ", col, col, col)
	}
	b.WriteString("updated_at = VALUES(updated_at)")
	return b.String(), args
}

// KeyFigures are the per-key figures of the rows created in a window.
type KeyFigures struct {
	Total, Failed int64
	// AverageTTL is the mean of expires_at - completed_at (expires_at -
	// created_at for rows not completed); zero without rows.
	AverageTTL time.Duration
}

// keysWindowSQL reads the per-key figures of a window. Every column it reads must stay in the
// covering index idx_idempotency_stats_window, and its WHERE must compare the bare created_at
// with a value (no function of the column), so the range is sargable and the rows are never
// read: TestKeysWindowReadsTheCoveringIndex checks the plan.
const keysWindowSQL = `SELECT COUNT(*) AS total,
  COALESCE(SUM(status = 'failed'), 0) AS failed,
  COALESCE(AVG(TIMESTAMPDIFF(MICROSECOND, COALESCE(completed_at, created_at), expires_at)), 0) AS avg_ttl_us
FROM idempotency_keys WHERE created_at >= ?`

// KeysCreatedSince returns the figures of the rows of idempotency_keys
// created at or after from (keysWindowSQL), taking no locks.
func KeysCreatedSince(ctx context.Context, q sqlx.QueryerContext, from time.Time) (KeyFigures, error) {
	var keys struct {
		Total    int64   `db:"total"`
		Failed   int64   `db:"failed"`
		AvgTTLus float64 `db:"avg_ttl_us"`
	}
	if err := sqlx.GetContext(ctx, q, &keys, keysWindowSQL, from); err != nil {
		return KeyFigures{}, err
	}
	return KeyFigures{Total: keys.Total, Failed: keys.Failed,
		AverageTTL: time.Duration(math.Round(keys.AvgTTLus)) * time.Microsecond}, nil
}

// SumStatsSince sums the counters of the idempotency_stats buckets from
// bucketsFrom on (a primary-key range) into dest, a struct whose db tags are
// StatsColumns. A missing table is an error wrapping ErrNoSuchTable.
func SumStatsSince(ctx context.Context, q sqlx.QueryerContext, bucketsFrom time.Time, dest any) error {
	query := "SELECT "
	for i, col := range statsColumns {
		if i > 0 {
			query += ", "
		}
		query += "COALESCE(SUM(" + col + "), 0) AS " + col
	}
	query += " FROM idempotency_stats WHERE bucket_start >= ?"
	err := sqlx.GetContext(ctx, q, dest, query, bucketsFrom)
	if errors.Is(err, sql.ErrNoRows) { // unreachable: an aggregate always returns a row
		return nil
	}
	return noSuchTable(err)
}

// savingsSQL sums idempotency_savings per tenant and scope from a bucket on (its primary key's
// range).
var savingsSQL = func() string {
	q := "SELECT tenant, scope"
	for _, col := range savingsColumns {
		q += ", CAST(SUM(" + col + ") AS SIGNED) AS " + col
	}
	return q + " FROM idempotency_savings WHERE bucket_start >= ? GROUP BY tenant, scope ORDER BY tenant, scope"
}()

// SumSavingsSince sums idempotency_savings per tenant and scope from
// bucketsFrom on into dest, a pointer to a slice of structs whose db tags
// are tenant, scope and SavingsColumns, ordered by tenant and scope.
func SumSavingsSince(ctx context.Context, q sqlx.QueryerContext, bucketsFrom time.Time, dest any) error {
	return noSuchTable(sqlx.SelectContext(ctx, q, dest, savingsSQL, bucketsFrom))
}

// SecretRows is how many live rows of idempotency_keys one secret id
// holds (see SecretRowCounts).
type SecretRows struct {
	SecretID    string // "" for the unnamed secret (secret_id NULL)
	Live        int64
	Started     int64
	LastExpires time.Time
}

// secretRowsSQL reads the index idx_idempotency_secret (secret_id, status,
// expires_at) alone, never the rows. A started row counts however long ago
// it expired: it answers for its key until it is taken over or deleted.
const secretRowsSQL = `SELECT secret_id, COUNT(*) AS live, COALESCE(SUM(status = 'started'), 0) AS started,
  MAX(expires_at) AS last_expires
FROM idempotency_keys
WHERE expires_at >= UTC_TIMESTAMP(6) OR status = 'started'
GROUP BY secret_id
ORDER BY secret_id`

// SecretRowCounts returns, per secret id (the unnamed secret first), the
// rows that still answer for their key: not expired, or started.
func SecretRowCounts(ctx context.Context, q sqlx.QueryerContext) ([]SecretRows, error) {
	var rows []struct {
		SecretID    sql.NullString `db:"secret_id"`
		Live        int64          `db:"live"`
		Started     int64          `db:"started"`
		LastExpires time.Time      `db:"last_expires"`
	}
	if err := sqlx.SelectContext(ctx, q, &rows, secretRowsSQL); err != nil {
		return nil, err
	}
	out := make([]SecretRows, len(rows))
	for i, r := range rows {
		out[i] = SecretRows{SecretID: r.SecretID.String, Live: r.Live, Started: r.Started, LastExpires: r.LastExpires}
	}
	return out, nil
}

// ScopeHour is one idempotency_stats bucket: its hour, its scope and its
// counters in StatsColumns' order.
type ScopeHour struct {
	Hour     time.Time
	Scope    string
	Counters []int64
}

// StatsHours returns the idempotency_stats buckets whose hour holds from or
// starts after it, by hour and scope.
func StatsHours(ctx context.Context, q sqlx.QueryerContext, from time.Time) ([]ScopeHour, error) {
	rows, err := q.QueryxContext(ctx, `SELECT bucket_start, scope, `+strings.Join(statsColumns, ", ")+`
		FROM idempotency_stats
		WHERE bucket_start >= DATE_FORMAT(?, '%Y-%m-%d %H:00:00')
		ORDER BY bucket_start, scope`, from)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ScopeHour
	for rows.Next() {
		h := ScopeHour{Counters: make([]int64, len(statsColumns))}
		dest := []any{&h.Hour, &h.Scope}
		for i := range h.Counters {
			dest = append(dest, &h.Counters[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// KeyHour counts one tenant's keys created in one hour and scope, by their
// status now.
type KeyHour struct {
	Hour                                time.Time
	Scope                               string
	Created, Succeeded, Failed, Started int64
}

// KeyHours returns tenant's keys created at or after from, per hour and
// scope: a range of uk_idempotency_tenant_scope_key on the tenant.
func KeyHours(ctx context.Context, q sqlx.QueryerContext, tenant string, from time.Time) ([]KeyHour, error) {
	rows, err := q.QueryxContext(ctx, `SELECT DATE_FORMAT(created_at, '%Y-%m-%d %H:00:00') AS hour, scope,
		COUNT(*) AS created,
		COALESCE(SUM(status = 'succeeded'), 0) AS succeeded,
		COALESCE(SUM(status = 'failed'), 0) AS failed,
		COALESCE(SUM(status = 'started'), 0) AS started
		FROM idempotency_keys
		WHERE tenant = ? AND created_at >= ?
		GROUP BY hour, scope
		ORDER BY hour, scope`, tenant, from)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []KeyHour
	for rows.Next() {
		var k KeyHour
		var hour string
		if err := rows.Scan(&hour, &k.Scope, &k.Created, &k.Succeeded, &k.Failed, &k.Started); err != nil {
			return nil, err
		}
		if k.Hour, err = time.Parse(time.DateTime, hour); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
