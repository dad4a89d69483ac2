package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/cleanup/cleanuptest"
	"github.com/idemguard/idemguard/internal/testdb"
)

// cleanupCLI runs `idemguard cleanup args...`, requires it to succeed,
// and returns its summary line.
func cleanupCLI(t *testing.T, environ map[string]string, args ...string) cleanupSummary {
	t.Helper()
	r := runCLI(t, environ, append([]string{"cleanup"}, args...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	return decodeSummary(t, r.stdout)
}

// countRows counts the rows of table (a name from this file, never input).
func countRows(t *testing.T, db *sqlx.DB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, db.GetContext(t.Context(), &n, `SELECT COUNT(*) FROM `+table))
	return n
}

func decodeSummary(t *testing.T, stdout string) cleanupSummary {
	t.Helper()
	require.Equal(t, 1, strings.Count(stdout, "\n"), "one line: %q", stdout)
	require.True(t, strings.HasSuffix(stdout, "\n"))
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	var s cleanupSummary
	require.NoError(t, dec.Decode(&s), stdout)
	return s
}

// Through the binary's entry point: the dry run reports what the run then
// deletes; the run prints one JSON line whose count is what left the table.
func TestCleanupCommand(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	rows := cleanuptest.Rows{Expired: 5_000, Live: 100, FreshStarted: 10, StaleStarted: 10}
	require.NoError(t, cleanuptest.Seed(t.Context(), d.DB, rows))
	environ := map[string]string{EnvMySQLDSN: d.DSN}

	r := runCLI(t, environ, "cleanup", "--dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `^\{"deleted":5010,"batches":0,"stats_deleted":0,"audit_deleted":0,"duration_ms":\d+,"dry_run":true,"stopped":"done"\}\n$`, r.stdout)
	n, err := cleanuptest.Count(t.Context(), d.DB)
	require.NoError(t, err)
	require.Equal(t, int64(rows.Total()), n, "the dry run deleted nothing")

	// --dsn wins over the environment.
	promFile := filepath.Join(t.TempDir(), "idemguard_cleanup.prom")
	r = runCLI(t, map[string]string{EnvMySQLDSN: "nobody@tcp(127.0.0.1:1)/nothing"},
		"cleanup", "--dsn", d.DSN, "--batch-size", "1000", "--pause", "0", "--max-duration", "30m", "--stale-after", "5m",
		"--metrics-file", promFile)
	require.Equal(t, exitOK, r.code, r.stderr)
	s := decodeSummary(t, r.stdout)
	require.Equal(t, cleanupSummary{Deleted: 5010, Batches: 6, DurationMS: s.DurationMS, DryRun: false, Stopped: "done"}, s)
	after, err := cleanuptest.Count(t.Context(), d.DB)
	require.NoError(t, err)
	require.Equal(t, n-after, s.Deleted, "the summary counts the rows that left the table")
	require.Equal(t, int64(rows.Live+rows.FreshStarted), after)
	require.Contains(t, r.stderr, `"msg":"cleanup: finished"`, "JSON logs on stderr")
	prom, err := os.ReadFile(promFile)
	require.NoError(t, err)
	require.Contains(t, string(prom), "idemguard_cleanup_deleted_rows 5010\n")
	require.Contains(t, string(prom), "idemguard_cleanup_success 1\n")

	s = cleanupCLI(t, environ)
	require.Equal(t, cleanupSummary{Stopped: "done", DurationMS: s.DurationMS}, s)
}

func TestCleanupUsageErrors(t *testing.T) {
	t.Parallel()
	dsn := []string{"--dsn", "u@tcp(127.0.0.1:1)/db"}
	requireUsageErrors(t, "cleanup", []usageCase{
		{"missing DSN", nil, "pass --dsn or set IDEMGUARD_MYSQL_DSN"},
		{"zero batch", append([]string{"--batch-size", "0"}, dsn...), "--batch-size must be between 1 and 100000, got 0"},
		{"negative batch", append([]string{"--batch-size", "-5"}, dsn...), "--batch-size must be between 1 and 100000, got -5"},
		{"huge batch", append([]string{"--batch-size", "100001"}, dsn...), "--batch-size must be between 1 and 100000"},
		{"batch not a number", append([]string{"--batch-size", "many"}, dsn...), `invalid value "many" for flag -batch-size`},
		{"negative max duration", append([]string{"--max-duration", "-1s"}, dsn...), "--max-duration must not be negative"},
		{"max duration without unit", append([]string{"--max-duration", "30"}, dsn...), `invalid value "30" for flag -max-duration`},
		{"negative pause", append([]string{"--pause", "-1ms"}, dsn...), "--pause must not be negative"},
		{"short stale after", append([]string{"--stale-after", "1ms"}, dsn...), "--stale-after must be at least 300ms"},
		{"unknown flag", append([]string{"--bogus"}, dsn...), "flag provided but not defined: -bogus"},
		{"positional", append(dsn, "now"), `unexpected argument "now"`},
		{"short stats retention", append([]string{"--stats-retention", "23h"}, dsn...), "--stats-retention must be at least 24h0m0s (or 0 to keep every bucket), got 23h0m0s"},
		{"stats retention in weeks", append([]string{"--stats-retention", "2w"}, dsn...), `invalid value "2w" for flag -stats-retention: want whole days like 90d`},
		{"negative stats retention", append([]string{"--stats-retention", "-1h"}, dsn...), `invalid value "-1h" for flag -stats-retention`},
		{"short audit retention", append([]string{"--audit-retention", "90m"}, dsn...), "--audit-retention must be at least 24h0m0s (or 0 to keep every event), got 1h30m0s"},
		{"audit retention in weeks", append([]string{"--audit-retention", "13w"}, dsn...), `invalid value "13w" for flag -audit-retention: want whole days like 90d`},
		{"negative audit retention", append([]string{"--audit-retention", "-1h"}, dsn...), `invalid value "-1h" for flag -audit-retention`},
		{"metrics file on a dry run", append([]string{"--dry-run", "--metrics-file", "x.prom"}, dsn...), "--metrics-file records real runs only"},
	})
}

func TestCleanupHelp(t *testing.T) {
	t.Parallel()
	r := runCLI(t, nil, "cleanup", "-h")
	require.Equal(t, exitOK, r.code)
	require.Contains(t, r.stderr, "0 3 * * * idemguard cleanup --max-duration 30m")
	require.Contains(t, r.stderr, "-dry-run")
	require.Contains(t, r.stderr, "-audit-retention value")
	require.Contains(t, r.stderr, "0 keeps every event (default 90d)")
}

func TestCleanupUnreachableDatabase(t *testing.T) {
	t.Parallel()
	r := runCLI(t, map[string]string{EnvMySQLDSN: "app:hunter2@tcp(127.0.0.1:1)/idemguard?timeout=1s"}, "cleanup")
	require.Equal(t, exitError, r.code, r.stderr)
	require.Contains(t, r.stderr, `"msg":"cleanup: connect to database"`)
	require.Contains(t, r.stderr, "app:xxxxx@tcp(127.0.0.1:1)/idemguard")
	require.NotContains(t, r.stderr, "hunter2")
	require.Empty(t, r.stdout)
}

// A database error during the run: exit 1, the error on stderr, and the summary of what was done
// (nothing here: the table does not exist) on stdout.
func TestCleanupDatabaseError(t *testing.T) {
	t.Parallel()
	d := testdb.NewEmpty(t) // no migrations: no idempotency_keys table
	r := runCLI(t, map[string]string{EnvMySQLDSN: d.DSN}, "cleanup")
	require.Equal(t, exitError, r.code, r.stderr)
	require.Contains(t, r.stderr, `"msg":"cleanup: stopped by a database error; only whole batches were deleted"`)
	require.Contains(t, r.stderr, "1146")
	s := decodeSummary(t, r.stdout)
	require.Equal(t, "error", s.Stopped)
	require.Zero(t, s.Deleted)

	r = runCLI(t, map[string]string{EnvMySQLDSN: d.DSN}, "cleanup", "--dry-run")
	require.Equal(t, exitError, r.code, r.stderr)
	require.Equal(t, "error", decodeSummary(t, r.stdout).Stopped)
}

// --stats-retention prunes idempotency_stats buckets past it (days or a duration), 0 keeps them
// all, and the summary line counts them.
func TestCleanupStatsRetention(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	// One bucket per day, 1 to 120 days old.
	_, err := d.DB.ExecContext(t.Context(), `INSERT INTO idempotency_stats (bucket_start, scope, requests, updated_at)
WITH RECURSIVE h (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM h WHERE n < 120)
SELECT CAST(DATE_FORMAT(UTC_TIMESTAMP(6), '%Y-%m-%d %H:00:00') AS DATETIME(6)) - INTERVAL n DAY, 's', 1, UTC_TIMESTAMP(6) FROM h`)
	require.NoError(t, err)
	environ := map[string]string{EnvMySQLDSN: d.DSN}
	left := func() int { return countRows(t, d.DB, "idempotency_stats") }

	require.Zero(t, cleanupCLI(t, environ, "--stats-retention", "0").StatsDeleted)
	require.Equal(t, 120, left())

	// A bucket goes when its hour started more than the retention ago: day 90's bucket started
	// before now - 90 days (unless now is exactly on the hour).
	require.EqualValues(t, 31, cleanupCLI(t, environ, "--dry-run").StatsDeleted, "the default keeps 90 days: days 90 to 120 go")
	require.Equal(t, 120, left())

	require.EqualValues(t, 31, cleanupCLI(t, environ).StatsDeleted)
	require.Equal(t, 89, left())

	require.EqualValues(t, 60, cleanupCLI(t, environ, "--stats-retention", "30d").StatsDeleted)

	require.EqualValues(t, 28, cleanupCLI(t, environ, "--stats-retention", "36h").StatsDeleted, "days 2 to 29 go, day 1 stays")
	require.Equal(t, 1, left())
}

// --audit-retention prunes idempotency_audit events past it (days or a duration), 0 keeps them
// all, and the summary line counts them apart from the keys and the stats.
func TestCleanupAuditRetention(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	// One event per day, 1 to 120 days old.
	_, err := d.DB.ExecContext(t.Context(), `INSERT INTO idempotency_audit (event_id, kind, at, tenant, scope, key_hash, attempt)
WITH RECURSIVE h (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM h WHERE n < 120)
SELECT LPAD(HEX(n), 32, '0'), 'replay', UTC_TIMESTAMP(6) - INTERVAL n DAY, 'acme', 's', REPEAT('a', 64), 1 FROM h`)
	require.NoError(t, err)
	environ := map[string]string{EnvMySQLDSN: d.DSN}
	left := func() int { return countRows(t, d.DB, "idempotency_audit") }

	require.Zero(t, cleanupCLI(t, environ, "--audit-retention", "0").AuditDeleted)
	require.Equal(t, 120, left())

	r := runCLI(t, environ, "cleanup", "--dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `^\{"deleted":0,"batches":0,"stats_deleted":0,"audit_deleted":31,"duration_ms":\d+,"dry_run":true,"stopped":"done"\}\n$`,
		r.stdout, "the default keeps 90 days: days 90 to 120 would go")
	require.Equal(t, 120, left())

	s := cleanupCLI(t, environ, "--audit-retention", "2160h", "--batch-size", "10", "--pause", "0")
	require.Equal(t, cleanupSummary{AuditDeleted: 31, DurationMS: s.DurationMS, Stopped: "done"}, s,
		"keys and their batches are counted apart")
	require.Equal(t, 89, left())

	require.EqualValues(t, 60, cleanupCLI(t, environ, "--audit-retention", "30d").AuditDeleted)
	require.Equal(t, 29, left())
}
