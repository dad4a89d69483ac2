package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemguard/idemguard/internal/config"
	"github.com/idemguard/idemguard/internal/stats"
)

const statsUsage = `usage: idemguard stats [flags]

Reports the health figures of the last --since (database clock) and compares them with the
alert thresholds:

  cache hit rate       replays / requests
  stale takeover rate  takeovers / executions (claims + retries + takeovers); a takeover
                       replaces a stale claim, a retry after a stored failure is not one
  failure rate         failed keys / keys created in the window
  average TTL          how long keys are kept after completion

Requests, replays, claims, retries and takeovers come from idempotency_stats (counted by
the servers); keys from idempotency_keys. A figure without data is never a breach.

Exit status, for alerting:
  0  every figure within its threshold
  1  a threshold breached (stderr says which)
  2  bad flags or a malformed DSN
  3  the figures could not be read (database unreachable, schema not migrated)
Rates are fractions (0.3) or percentages (30%).

idemguard stats secrets counts the live rows per secret id (see idemguard stats secrets -h).

flags:
`

// Exit codes of `idemguard stats` beyond exitOK and exitUsage: alerting must tell a sick service
// from a check that could not look.
const (
	exitBreach     = 1
	exitUnreadable = 3
)

// rateFlag is a threshold flag: a fraction in [0, 1], written 0.05 or 5%.
type rateFlag float64

func (r *rateFlag) String() string { return stats.Percent(float64(*r)) }

func (r *rateFlag) Set(s string) error {
	s = strings.TrimSpace(s)
	scale := 1.0
	if p, ok := strings.CutSuffix(s, "%"); ok {
		s, scale = strings.TrimSpace(p), 100
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return errors.New("want a fraction (0.05) or a percentage (5%)")
	}
	v /= scale
	if v < 0 || v > 1 {
		return fmt.Errorf("must be between 0 and 1 (0%% and 100%%), got %s", stats.Percent(v))
	}
	*r = rateFlag(v)
	return nil
}

// spanFlag is a duration flag that also accepts days ("7d", "1d12h"): config.ParseDuration, the
// parser of the config file's durations too.
type spanFlag time.Duration

func (d *spanFlag) String() string { return time.Duration(*d).String() }

func (d *spanFlag) Set(s string) error {
	v, err := config.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration (90m, 24h) or days (7d, 1d12h)")
	}
	if v < time.Second || v > stats.MaxSince {
		return fmt.Errorf("must be between 1s and %s, got %s", stats.MaxSince, v)
	}
	*d = spanFlag(v)
	return nil
}

// statsJSON is the object `idemguard stats --json` prints. Rates are null when there is no data.
type statsJSON struct {
	Since             string       `json:"since"`
	SinceSeconds      int64        `json:"since_seconds"`
	Now               time.Time    `json:"now"`
	WindowStart       time.Time    `json:"window_start"`
	BucketsFrom       time.Time    `json:"buckets_from"`
	TotalKeys         int64        `json:"total_keys"`
	Executions        int64        `json:"executions"`
	FailedKeys        int64        `json:"failed_keys"`
	AverageTTLSeconds *float64     `json:"average_ttl_seconds"`
	CacheHitRate      *float64     `json:"cache_hit_rate"`
	TakeoverRate      *float64     `json:"stale_takeover_rate"`
	FailureRate       *float64     `json:"failure_rate"`
	Counts            stats.Counts `json:"counts"`
	// Savings: per tenant and scope, the executions run and the calls, tokens and cost replays avoided.
	Savings    []stats.TenantSavings `json:"savings"`
	Thresholds thresholdsJSON        `json:"thresholds"`
	Breaches   []stats.Breach        `json:"breaches"`
	OK         bool                  `json:"ok"`
}

type thresholdsJSON struct {
	MaxTakeoverRate float64 `json:"max_stale_takeover_rate"`
	MinHitRate      float64 `json:"min_cache_hit_rate"`
	MaxFailureRate  float64 `json:"max_failure_rate"`
}

// runStats implements `idemguard stats`.
func runStats(ctx context.Context, e env, args []string) int {
	if len(args) > 0 && args[0] == "secrets" {
		return runStatsSecrets(ctx, e, args[1:])
	}
	fs := newFlagSet(e, "stats", statsUsage)
	dsnFlag := fs.String("dsn", "", "MySQL DSN, user:password@tcp(host:3306)/dbname (default $"+EnvMySQLDSN+")")
	since := spanFlag(24 * time.Hour)
	fs.Var(&since, "since", "the window: a duration (90m, 24h) or days (7d, 1d12h)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	maxTakeover := rateFlag(stats.DefaultMaxTakeoverRate)
	minHit := rateFlag(stats.DefaultMinHitRate)
	maxFailure := rateFlag(stats.DefaultMaxFailureRate)
	fs.Var(&maxTakeover, "max-takeover-rate", "alert when the stale takeover rate is above this")
	fs.Var(&minHit, "min-hit-rate", "alert when the cache hit rate is below this")
	fs.Var(&maxFailure, "max-failure-rate", "alert when the failure rate is above this")
	if code, ok := parseFlagsOnly(e, fs, args); !ok {
		return code
	}
	th := stats.Thresholds{MaxTakeoverRate: float64(maxTakeover), MinHitRate: float64(minHit), MaxFailureRate: float64(maxFailure)}
	db, log, code := openDB(ctx, e, "stats", *dsnFlag, 1, exitUnreadable)
	if db == nil {
		return code
	}
	defer db.Close()
	r, err := stats.Collect(ctx, db, time.Duration(since))
	if err != nil {
		log.ErrorContext(ctx, "stats: read the figures", "err", err)
		return exitUnreadable
	}
	breaches := r.Check(th)

	if *asJSON {
		if err := writeStatsJSON(e.stdout, r, th, breaches); err != nil {
			log.ErrorContext(ctx, "stats: write the report", "err", err)
			return exitUnreadable
		}
	} else {
		writeStatsTable(e.stdout, r, th, breaches)
	}
	if len(breaches) > 0 {
		msgs := make([]string, len(breaches))
		for i, b := range breaches {
			msgs[i] = b.String()
		}
		fmt.Fprintf(e.stderr, "idemguard stats: threshold breached: %s\n", strings.Join(msgs, "; "))
		return exitBreach
	}
	return exitOK
}

func optional(v float64, ok bool) *float64 {
	if !ok {
		return nil
	}
	return &v
}

func writeStatsJSON(w io.Writer, r stats.Report, th stats.Thresholds, breaches []stats.Breach) error {
	out := statsJSON{
		Since: r.Since.String(), SinceSeconds: int64(r.Since.Seconds()),
		Now: r.Now, WindowStart: r.WindowStart, BucketsFrom: r.BucketsFrom,
		TotalKeys: r.TotalKeys, Executions: r.Executions(), FailedKeys: r.FailedKeys,
		AverageTTLSeconds: optional(r.AverageTTL.Seconds(), r.TotalKeys > 0),
		CacheHitRate:      optional(r.HitRate()),
		TakeoverRate:      optional(r.TakeoverRate()),
		FailureRate:       optional(r.FailureRate()),
		Counts:            r.Counts,
		Savings:           r.Savings,
		Thresholds:        thresholdsJSON{MaxTakeoverRate: th.MaxTakeoverRate, MinHitRate: th.MinHitRate, MaxFailureRate: th.MaxFailureRate},
		Breaches:          breaches,
		OK:                len(breaches) == 0,
	}
	if out.Breaches == nil {
		out.Breaches = []stats.Breach{}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

func writeStatsTable(w io.Writer, r stats.Report, th stats.Thresholds, breaches []stats.Breach) {
	breached := map[stats.Figure]bool{}
	for _, b := range breaches {
		breached[b.Figure] = true
	}
	status := func(f stats.Figure, ok bool) string {
		switch {
		case !ok:
			return "no data"
		case breached[f]:
			return "BREACH"
		}
		return "ok"
	}
	value := func(v float64, ok bool) string {
		if !ok {
			return "-"
		}
		return stats.Percent(v)
	}
	const stamp = "2006-01-02 15:04:05Z"
	fmt.Fprintf(w, "idemguard stats: last %s, %s .. %s (database clock, UTC)\n\n",
		r.Since, r.WindowStart.Format(stamp), r.Now.Format(stamp))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tVALUE\tTHRESHOLD\tSTATUS\tDETAIL")
	fmt.Fprintf(tw, "total keys\t%d\t-\t-\tkeys created in the window\n", r.TotalKeys)
	hit, hitOK := r.HitRate()
	fmt.Fprintf(tw, "cache hit rate\t%s\t>= %s\t%s\t%d replays / %d requests\n",
		value(hit, hitOK), stats.Percent(th.MinHitRate), status(stats.FigureHitRate, hitOK), r.Counts.Replays, r.Counts.Requests)
	tk, tkOK := r.TakeoverRate()
	fmt.Fprintf(tw, "stale takeover rate\t%s\t<= %s\t%s\t%d takeovers / %d executions (%d retries not counted)\n",
		value(tk, tkOK), stats.Percent(th.MaxTakeoverRate), status(stats.FigureTakeoverRate, tkOK), r.Counts.Takeovers, r.Executions(), r.Counts.Retries)
	fl, flOK := r.FailureRate()
	fmt.Fprintf(tw, "failure rate\t%s\t<= %s\t%s\t%d of %d keys failed\n",
		value(fl, flOK), stats.Percent(th.MaxFailureRate), status(stats.FigureFailureRate, flOK), r.FailedKeys, r.TotalKeys)
	ttl := "-"
	if r.TotalKeys > 0 {
		ttl = r.AverageTTL.Round(time.Second).String()
	}
	fmt.Fprintf(tw, "average TTL\t%s\t-\t-\texpires_at - completed_at\n", ttl)
	_ = tw.Flush()
	c := r.Counts
	fmt.Fprintf(w, "\nserver counters since %s (whole hours): requests %d, claims %d, retries %d, takeovers %d, "+
		"replays %d, in_progress %d, retry_limits %d, mismatches %d, failures %d, lost_claims %d, store_errors %d\n",
		r.BucketsFrom.Format(stamp), c.Requests, c.Claims, c.Retries, c.Takeovers, c.Replays, c.InProgress,
		c.RetryLimits, c.Mismatches, c.Failures, c.LostClaims, c.StoreErrors)
	if len(r.Savings) == 0 {
		return
	}
	fmt.Fprintf(w, "\nwhat replays saved since %s, per tenant and scope (cost in the currency of the scope's prices):\n", r.BucketsFrom.Format(stamp))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tSCOPE\tEXECUTIONS\tAVOIDED CALLS\tAVOIDED PROMPT TOKENS\tAVOIDED COMPLETION TOKENS\tAVOIDED COST")
	for _, s := range r.Savings {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", s.Tenant, s.Scope, s.Executions, s.AvoidedCalls,
			s.AvoidedPromptTokens, s.AvoidedCompletionTokens, strconv.FormatFloat(float64(s.AvoidedCostNanos)/1e9, 'f', -1, 64))
	}
	_ = tw.Flush()
}
