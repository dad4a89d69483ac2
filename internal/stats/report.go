package stats

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/idemguard/idemguard/internal/mysqlstore"
)

// Default alert thresholds (the seed's).
const (
	DefaultMaxTakeoverRate = 0.05
	DefaultMinHitRate      = 0.30
	DefaultMaxFailureRate  = 0.10
)

// MaxSince is the longest window [Collect] accepts.
const MaxSince = 400 * 24 * time.Hour

// Figure names a health figure; the names are also the JSON keys of the rates.
type Figure string

// The figures with thresholds.
const (
	FigureHitRate      Figure = "cache_hit_rate"
	FigureTakeoverRate Figure = "stale_takeover_rate"
	FigureFailureRate  Figure = "failure_rate"
)

// Report holds the health figures of one window, read by [Collect].
type Report struct {
	// Since is the window's length; the window is [WindowStart, Now].
	Since time.Duration
	// Now is the database clock when the report was read.
	Now time.Time
	// WindowStart is Now - Since.
	WindowStart time.Time
	// BucketsFrom is the first hour of idempotency_stats counted: WindowStart rounded down to the
	// hour (the buckets are hourly), so Counts may cover up to an hour more than the window.
	BucketsFrom time.Time

	// TotalKeys is the number of rows of idempotency_keys created in the window (created_at >=
	// WindowStart). Rows already deleted by cleanup are not counted: a window longer than the
	// shortest TTL undercounts.
	TotalKeys int64
	// FailedKeys is the number of those rows whose status is failed.
	FailedKeys int64
	// AverageTTL is the mean of expires_at - completed_at (expires_at - created_at for rows not
	// completed) over those rows: the TTL keys are kept for. Zero when TotalKeys is zero.
	AverageTTL time.Duration

	// Counts sums idempotency_stats over the buckets from BucketsFrom: requests, replays and the
	// other protocol counters, from every server that flushed.
	Counts Counts
	// Savings sums idempotency_savings over the same buckets, per tenant and scope (sorted):
	// the executions run, and the calls, tokens and cost replays avoided.
	Savings []TenantSavings
}

// TenantSavings is one tenant's scope in [Report.Savings].
type TenantSavings struct {
	Tenant string `json:"tenant" db:"tenant"`
	Scope  string `json:"scope" db:"scope"`
	Savings
}

// rate returns num/den, and false when den is zero ("no data").
func rate(num, den int64) (float64, bool) {
	if den <= 0 {
		return 0, false
	}
	return float64(num) / float64(den), true
}

// HitRate is Replays / Requests: the share of answered calls served from a stored result. False
// when there were no requests.
func (r Report) HitRate() (float64, bool) { return rate(r.Counts.Replays, r.Counts.Requests) }

// Executions is the number of executions the guard started in the window's buckets: fresh
// claims, retries after a stored failure, and stale takeovers.
func (r Report) Executions() int64 { return r.Counts.Claims + r.Counts.Retries + r.Counts.Takeovers }

// TakeoverRate is Counts.Takeovers / Executions: the share of executions that began by replacing
// a stale claim, an owner that went silent for staleAfter (a crashed, killed or stalled server):
// a high rate means owners die mid-run, and operators alert on it. A retry after a stored
// failure (a provider outage) is not a takeover and does not raise it; it shows in the failure
// rate. The takeovers come from the engine's takeover events as the servers counted them into
// idempotency_stats, not from attempt_count, which cannot tell a takeover from a retry. False
// when nothing was executed.
func (r Report) TakeoverRate() (float64, bool) { return rate(r.Counts.Takeovers, r.Executions()) }

// FailureRate is FailedKeys / TotalKeys. False when there were no keys.
func (r Report) FailureRate() (float64, bool) { return rate(r.FailedKeys, r.TotalKeys) }

// Thresholds are the alert thresholds, as fractions (0.05 is 5%).
type Thresholds struct {
	// MaxTakeoverRate: a takeover rate above it is a breach. Default [DefaultMaxTakeoverRate].
	MaxTakeoverRate float64
	// MinHitRate: a hit rate below it is a breach. Default [DefaultMinHitRate].
	MinHitRate float64
	// MaxFailureRate: a failure rate above it is a breach. Default [DefaultMaxFailureRate].
	MaxFailureRate float64
}

// DefaultThresholds are the seed's alert thresholds.
var DefaultThresholds = Thresholds{MaxTakeoverRate: DefaultMaxTakeoverRate, MinHitRate: DefaultMinHitRate,
	MaxFailureRate: DefaultMaxFailureRate}

// Validate reports the first threshold outside [0, 1], naming it.
func (t Thresholds) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"MaxTakeoverRate", t.MaxTakeoverRate}, {"MinHitRate", t.MinHitRate}, {"MaxFailureRate", t.MaxFailureRate}} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > 1 {
			return fmt.Errorf("stats: Thresholds.%s must be between 0 and 1, got %v", f.name, f.v)
		}
	}
	return nil
}

// Breach is one figure past its threshold.
type Breach struct {
	Figure    Figure  `json:"figure"`
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// Op is how Value compares with Threshold: ">" or "<".
	Op string `json:"op"`
}

func (b Breach) String() string {
	return fmt.Sprintf("%s %s %s %s", name(b.Figure), Percent(b.Value), b.Op, Percent(b.Threshold))
}

func name(f Figure) string {
	switch f {
	case FigureHitRate:
		return "cache hit rate"
	case FigureTakeoverRate:
		return "stale takeover rate"
	case FigureFailureRate:
		return "failure rate"
	}
	return string(f)
}

// Percent formats a fraction as a percentage with one decimal: 0.123 → "12.3%".
func Percent(v float64) string { return fmt.Sprintf("%.1f%%", v*100) }

// Check compares the report with t and returns the breaches, in the order takeover, hit rate,
// failure. A figure without data (no keys, no executions, no requests) is never a breach:
// an idle service is not an unhealthy one.
func (r Report) Check(t Thresholds) []Breach {
	var out []Breach
	if v, ok := r.TakeoverRate(); ok && v > t.MaxTakeoverRate {
		out = append(out, Breach{Figure: FigureTakeoverRate, Value: v, Threshold: t.MaxTakeoverRate, Op: ">"})
	}
	if v, ok := r.HitRate(); ok && v < t.MinHitRate {
		out = append(out, Breach{Figure: FigureHitRate, Value: v, Threshold: t.MinHitRate, Op: "<"})
	}
	if v, ok := r.FailureRate(); ok && v > t.MaxFailureRate {
		out = append(out, Breach{Figure: FigureFailureRate, Value: v, Threshold: t.MaxFailureRate, Op: ">"})
	}
	return out
}

// ErrNoStatsTable is returned by [Collect] when idempotency_stats does not exist.
var ErrNoStatsTable = errors.New("stats: table idempotency_stats does not exist; apply the migrations (idemguard migrate up)")

// Collect reads the figures of the window that ends at the database clock's now and lasts
// since, through the MySQL store: idempotency_keys by a range of the covering index
// idx_idempotency_stats_window (migration 00006), taking no locks (mysqlstore.KeysCreatedSince),
// and idempotency_stats and idempotency_savings by primary-key range.
func Collect(ctx context.Context, db *sqlx.DB, since time.Duration) (Report, error) {
	if since <= 0 || since > MaxSince {
		return Report{}, fmt.Errorf("stats: the window must be between 1s and %s, got %s", MaxSince, since)
	}
	r := Report{Since: since}
	var err error
	if r.Now, err = mysqlstore.DBNow(ctx, db); err != nil {
		return Report{}, fmt.Errorf("stats: read the database clock: %w", err)
	}
	r.WindowStart = r.Now.Add(-since)
	r.BucketsFrom = r.WindowStart.Truncate(time.Hour)

	keys, err := mysqlstore.KeysCreatedSince(ctx, db, r.WindowStart)
	if err != nil {
		return Report{}, fmt.Errorf("stats: read idempotency_keys: %w", err)
	}
	r.TotalKeys, r.FailedKeys, r.AverageTTL = keys.Total, keys.Failed, keys.AverageTTL

	if err := mysqlstore.SumStatsSince(ctx, db, r.BucketsFrom, &r.Counts); err != nil {
		if errors.Is(err, mysqlstore.ErrNoSuchTable) {
			return Report{}, ErrNoStatsTable
		}
		return Report{}, fmt.Errorf("stats: read idempotency_stats: %w", err)
	}
	if err := mysqlstore.SumSavingsSince(ctx, db, r.BucketsFrom, &r.Savings); err != nil {
		return Report{}, fmt.Errorf("stats: read idempotency_savings: %w", err)
	}
	return r, nil
}
