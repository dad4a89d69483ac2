package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/cleanup"
	"github.com/idemguard/idemguard/internal/metrics"
)

const cleanupUsage = `usage: idemguard cleanup [flags]

Deletes idempotency keys whose expires_at has passed (database clock), in batches, never a
started key whose owner is still heartbeating; then the idempotency_stats buckets older than
--stats-retention and the audit events (idempotency_audit) and counts (idempotency_audit_tally)
older than --audit-retention. Meant for a daily cron at 03:00:

  0 3 * * * idemguard cleanup --max-duration 30m >> /var/log/idemguard-cleanup.log 2>&1

Prints one JSON line to stdout:
  {"deleted":N,"batches":N,"stats_deleted":N,"audit_deleted":N,"duration_ms":N,"dry_run":false,"stopped":"done"}
stopped is done (nothing left), max_duration (rows remain for the next run), canceled (SIGTERM)
or error. Exit status: 0 done or max_duration, 1 database error or interrupted (only whole
batches were deleted), 2 bad flags or a malformed DSN.

flags:
`

// cleanupSummary is the JSON line `idemguard cleanup` prints.
type cleanupSummary struct {
	Deleted int64 `json:"deleted"`
	Batches int   `json:"batches"`
	// StatsDeleted counts the idempotency_stats buckets pruned.
	StatsDeleted int64 `json:"stats_deleted"`
	// AuditDeleted counts the idempotency_audit events and idempotency_audit_tally counts pruned.
	AuditDeleted int64  `json:"audit_deleted"`
	DurationMS   int64  `json:"duration_ms"`
	DryRun       bool   `json:"dry_run"`
	Stopped      string `json:"stopped"`
}

// cleanupFlags are the parsed flags of `idemguard cleanup`.
type cleanupFlags struct {
	dsn         string
	opts        cleanup.Options
	metricsFile string
}

// runCleanup implements `idemguard cleanup`.
func runCleanup(ctx context.Context, e env, args []string) int {
	f, code, ok := parseCleanupFlags(e, args)
	if !ok {
		return code
	}
	db, log, code := openDB(ctx, e, "cleanup", f.dsn, 2, exitError)
	if db == nil {
		return code
	}
	defer db.Close()
	f.opts.Logger = log
	sum, runErr := cleanup.Run(ctx, db, f.opts)
	return reportCleanup(ctx, e, f, sum, runErr)
}

// parseCleanupFlags parses and checks the flags of `idemguard cleanup`,
// turning them into cleanup.Options; ok is false with the exit status when
// they are bad.
func parseCleanupFlags(e env, args []string) (f cleanupFlags, code int, ok bool) {
	fs := newFlagSet(e, "cleanup", cleanupUsage)
	fs.StringVar(&f.dsn, "dsn", "", "MySQL DSN, user:password@tcp(host:3306)/dbname (default $"+EnvMySQLDSN+")")
	batchSize := fs.Int("batch-size", cleanup.DefaultBatchSize, fmt.Sprintf("rows per DELETE, 1 to %d", cleanup.MaxBatchSize))
	maxDuration := fs.Duration("max-duration", 0, "stop starting batches after this long; 0 for no limit (e.g. 30m)")
	pause := fs.Duration("pause", cleanup.DefaultPause, "pause between batches, so live claims get the server; 0 for none")
	staleAfter := fs.Duration("stale-after", idemguard.DefaultStaleAfter,
		"the lease of a started key stored without one: never delete such a key heartbeated within this; set it to the largest StaleAfter of any scope")
	statsRetention := retention(cleanup.DefaultStatsRetention)
	fs.Var(&statsRetention, "stats-retention", "delete idempotency_stats buckets older than this, at least 24h; "+
		"days allowed (e.g. 90d, 36h); 0 keeps every bucket")
	auditRetention := retention(cleanup.DefaultAuditRetention)
	fs.Var(&auditRetention, "audit-retention", "delete audit events (and counts whose last event is) older than this, at least 24h; "+
		"days allowed (e.g. 90d, 36h); 0 keeps every event")
	dryRun := fs.Bool("dry-run", false, "count the rows a run would delete; delete nothing")
	fs.StringVar(&f.metricsFile, "metrics-file", "", "also write the run's figures to this file for node_exporter's "+
		"textfile collector (e.g. /var/lib/node_exporter/textfile/idemguard_cleanup.prom); not with --dry-run")
	if code, ok := parseFlagsOnly(e, fs, args); !ok {
		return f, code, false
	}
	usageErr := func(format string, a ...any) (cleanupFlags, int, bool) {
		fmt.Fprintf(e.stderr, "idemguard cleanup: "+format+"\n", a...)
		return f, exitUsage, false
	}
	switch {
	case *batchSize < 1 || *batchSize > cleanup.MaxBatchSize:
		return usageErr("--batch-size must be between 1 and %d, got %d", cleanup.MaxBatchSize, *batchSize)
	case *maxDuration < 0:
		return usageErr("--max-duration must not be negative (0 for no limit), got %s", *maxDuration)
	case *pause < 0:
		return usageErr("--pause must not be negative (0 for none), got %s", *pause)
	case *staleAfter < idemguard.MinStaleAfter:
		return usageErr("--stale-after must be at least %s, got %s", idemguard.MinStaleAfter, *staleAfter)
	case statsRetention != 0 && time.Duration(statsRetention) < cleanup.MinStatsRetention:
		return usageErr("--stats-retention must be at least %s (or 0 to keep every bucket), got %s",
			cleanup.MinStatsRetention, time.Duration(statsRetention))
	case auditRetention != 0 && time.Duration(auditRetention) < cleanup.MinAuditRetention:
		return usageErr("--audit-retention must be at least %s (or 0 to keep every event), got %s",
			cleanup.MinAuditRetention, time.Duration(auditRetention))
	case f.metricsFile != "" && *dryRun:
		return usageErr("--metrics-file records real runs only; drop it or --dry-run")
	}
	f.opts = cleanup.Options{BatchSize: *batchSize, MaxDuration: *maxDuration, Pause: *pause,
		DryRun: *dryRun, StaleAfter: *staleAfter, StatsRetention: time.Duration(statsRetention),
		AuditRetention: time.Duration(auditRetention)}
	if *pause == 0 {
		f.opts.Pause = -1 // cleanup.Options: negative means no pause; zero would mean the default
	}
	if statsRetention == 0 {
		f.opts.StatsRetention = -1 // cleanup.Options: negative keeps every bucket
	}
	if auditRetention == 0 {
		f.opts.AuditRetention = -1 // cleanup.Options: negative keeps every event
	}
	return f, 0, true
}

// reportCleanup prints the run's summary line, writes the metrics file when
// asked, and gives the exit status.
func reportCleanup(ctx context.Context, e env, f cleanupFlags, sum cleanup.Summary, runErr error) int {
	log := f.opts.Logger
	out, err := json.Marshal(cleanupSummary{Deleted: sum.Deleted, Batches: sum.Batches, StatsDeleted: sum.StatsDeleted,
		AuditDeleted: sum.AuditDeleted, DurationMS: sum.Duration.Milliseconds(), DryRun: sum.DryRun, Stopped: string(sum.Stopped)})
	if err != nil { // unreachable: the struct always marshals
		log.ErrorContext(ctx, "cleanup: encode the summary", "err", err)
		return exitError
	}
	fmt.Fprintln(e.stdout, string(out))
	if f.metricsFile != "" {
		run := metrics.CleanupRun{Deleted: sum.Deleted, Batches: sum.Batches, Duration: sum.Duration,
			OK: runErr == nil && sum.Stopped != cleanup.StopCanceled, At: time.Now()}
		if err := metrics.WriteCleanupTextfile(f.metricsFile, run); err != nil {
			log.ErrorContext(ctx, "cleanup: write the metrics file", "err", err, "path", f.metricsFile)
			return exitError
		}
	}
	switch {
	case runErr != nil:
		log.ErrorContext(ctx, "cleanup: stopped by a database error; only whole batches were deleted",
			"err", runErr, "deleted", sum.Deleted, "batches", sum.Batches)
		return exitError
	case sum.Stopped == cleanup.StopCanceled:
		log.WarnContext(ctx, "cleanup: interrupted; the remaining rows stay for the next run",
			"deleted", sum.Deleted, "batches", sum.Batches)
		return exitError
	}
	return exitOK
}

// retention is a duration flag that also takes whole days ("90d"), for retention periods.
type retention time.Duration

func (r *retention) String() string {
	d := time.Duration(*r)
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

func (r *retention) Set(s string) error {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 16)
		if err != nil {
			return fmt.Errorf("want whole days like 90d, or a duration like 36h")
		}
		*r = retention(time.Duration(n) * 24 * time.Hour)
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("want whole days like 90d, or a duration like 36h")
	}
	*r = retention(d)
	return nil
}
