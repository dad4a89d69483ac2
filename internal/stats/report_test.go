package stats_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/internal/stats"
	"github.com/idemguard/idemguard/internal/stats/statstest"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/sanitize"
)

// seededReport seeds a database of its own (statstest.Seed) and collects its
// figures over 24 hours; it returns the database, the seed's now and the report.
func seededReport(t *testing.T) (*testdb.Database, time.Time, stats.Report) {
	t.Helper()
	d := testdb.New(t)
	now, err := statstest.Seed(t.Context(), d.DB)
	require.NoError(t, err)
	r, err := stats.Collect(t.Context(), d.DB, 24*time.Hour)
	require.NoError(t, err)
	return d, now, r
}

// The figures of a table seeded with known counts, exactly.
func TestCollectKnownFigures(t *testing.T) {
	t.Parallel()
	d, now, r := seededReport(t)
	ctx := t.Context()
	require.WithinDuration(t, now, r.Now, time.Minute)
	require.Equal(t, r.Now.Add(-24*time.Hour), r.WindowStart)
	require.Equal(t, r.WindowStart.Truncate(time.Hour), r.BucketsFrom)

	require.Equal(t, int64(statstest.TotalKeys), r.TotalKeys, "keys created before the window are left out")
	require.Equal(t, int64(statstest.Claims+statstest.Retries+statstest.Takeovers), r.Executions())
	require.Equal(t, int64(statstest.Retries), r.Counts.Retries)
	require.Equal(t, int64(statstest.FailedKeys), r.FailedKeys)
	require.Equal(t, statstest.AverageTTL, r.AverageTTL)
	require.Equal(t, int64(statstest.Requests), r.Counts.Requests, "whole hours from the window's first hour")
	require.Equal(t, int64(statstest.Replays), r.Counts.Replays)
	require.Equal(t, int64(statstest.Takeovers), r.Counts.Takeovers)
	require.Equal(t, int64(statstest.Failures), r.Counts.Failures)

	hit, ok := r.HitRate()
	require.True(t, ok)
	require.Equal(t, 0.225, hit)
	takeover, ok := r.TakeoverRate()
	require.True(t, ok)
	require.Equal(t, 0.07, takeover, "takeovers / executions; the %d retried keys are not takeovers", statstest.RetriedKeys)
	failure, ok := r.FailureRate()
	require.True(t, ok)
	require.Equal(t, 0.12, failure)

	// A 2h window holds the same keys (created an hour ago) and only this hour's and the
	// previous hour's buckets.
	r, err := stats.Collect(ctx, d.DB, 2*time.Hour)
	require.NoError(t, err)
	require.Equal(t, int64(statstest.TotalKeys), r.TotalKeys)
	require.Equal(t, int64(100), r.Counts.Requests)
	require.Equal(t, int64(20), r.Counts.Replays)
}

// Each threshold breaches on its own; comparisons are strict (a figure equal to its threshold is
// fine).
func TestCheckEachThreshold(t *testing.T) {
	t.Parallel()
	_, _, r := seededReport(t)

	lenient := stats.Thresholds{MaxTakeoverRate: 0.10, MinHitRate: 0.20, MaxFailureRate: 0.20}
	for _, tt := range []struct {
		name string
		th   stats.Thresholds
		want []stats.Breach
	}{
		{"defaults: all three", stats.DefaultThresholds, []stats.Breach{
			{Figure: stats.FigureTakeoverRate, Value: 0.07, Threshold: 0.05, Op: ">"},
			{Figure: stats.FigureHitRate, Value: 0.225, Threshold: 0.30, Op: "<"},
			{Figure: stats.FigureFailureRate, Value: 0.12, Threshold: 0.10, Op: ">"},
		}},
		{"none", lenient, nil},
		{"takeover only", with(lenient, func(t *stats.Thresholds) { t.MaxTakeoverRate = 0.05 }),
			[]stats.Breach{{Figure: stats.FigureTakeoverRate, Value: 0.07, Threshold: 0.05, Op: ">"}}},
		{"hit rate only", with(lenient, func(t *stats.Thresholds) { t.MinHitRate = 0.30 }),
			[]stats.Breach{{Figure: stats.FigureHitRate, Value: 0.225, Threshold: 0.30, Op: "<"}}},
		{"failure only", with(lenient, func(t *stats.Thresholds) { t.MaxFailureRate = 0.10 }),
			[]stats.Breach{{Figure: stats.FigureFailureRate, Value: 0.12, Threshold: 0.10, Op: ">"}}},
		{"equal is fine", stats.Thresholds{MaxTakeoverRate: 0.07, MinHitRate: 0.225, MaxFailureRate: 0.12}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, tt.th.Validate())
			require.Equal(t, tt.want, r.Check(tt.th))
		})
	}
	require.Equal(t, "failure rate 12.0% > 10.0%", r.Check(stats.DefaultThresholds)[2].String())
	require.Equal(t, "cache hit rate 22.5% < 30.0%", r.Check(stats.DefaultThresholds)[1].String())
}

func with(t stats.Thresholds, f func(*stats.Thresholds)) stats.Thresholds {
	f(&t)
	return t
}

// No keys and no requests: no data, which breaches nothing.
func TestNoDataIsNotABreach(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	r, err := stats.Collect(t.Context(), d.DB, 24*time.Hour)
	require.NoError(t, err)
	require.Zero(t, r.TotalKeys)
	require.Zero(t, r.Counts)
	require.Zero(t, r.AverageTTL)
	_, ok := r.HitRate()
	require.False(t, ok)
	_, ok = r.TakeoverRate()
	require.False(t, ok)
	_, ok = r.FailureRate()
	require.False(t, ok)
	require.Empty(t, r.Check(stats.DefaultThresholds))
	require.Empty(t, r.Check(stats.Thresholds{MinHitRate: 1}), "even a 100% minimum hit rate")
}

func TestCollectErrors(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := t.Context()
	for _, since := range []time.Duration{0, -time.Hour, stats.MaxSince + time.Hour} {
		_, err := stats.Collect(ctx, d.DB, since)
		require.ErrorContains(t, err, "the window must be between 1s and")
	}
	_, err := d.DB.ExecContext(ctx, `DROP TABLE idempotency_stats`)
	require.NoError(t, err)
	_, err = stats.Collect(ctx, d.DB, time.Hour)
	require.ErrorIs(t, err, stats.ErrNoStatsTable)
	require.ErrorContains(t, err, "idemguard migrate up")
}

func TestThresholdsValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, stats.DefaultThresholds.Validate())
	for _, tt := range []struct {
		th   stats.Thresholds
		want string
	}{
		{stats.Thresholds{MaxTakeoverRate: -0.1}, "Thresholds.MaxTakeoverRate must be between 0 and 1"},
		{stats.Thresholds{MinHitRate: 1.5}, "Thresholds.MinHitRate must be between 0 and 1"},
		{stats.Thresholds{MaxFailureRate: math.NaN()}, "Thresholds.MaxFailureRate must be between 0 and 1"},
	} {
		require.ErrorContains(t, tt.th.Validate(), tt.want)
	}
}

// A provider outage makes operations fail and their keys run again (a retry after a stored
// failure, attempt_count 2): that is not a stale takeover and must not raise the takeover rate,
// the alert for owners that die mid-run. Guard, recorder and report wired as in `idemguard serve`.
func TestRetryAfterFailureIsNotATakeover(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := t.Context()
	rec, err := stats.NewRecorder(d.DB, stats.RecorderOptions{})
	require.NoError(t, err)
	guard, err := idemguard.New(idemguard.Config{Store: mysqlstore.New(d.DB), Secret: []byte(strings.Repeat("s", 32)),
		Observe: rec.Observe, ReplayCacheSize: -1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = guard.Close(context.Background()) })

	outage := func(context.Context) (any, error) {
		return nil, &idemguard.OpError{Reason: sanitize.ProviderError, Err: errors.New("upstream 503")}
	}
	ok := func(context.Context) (any, error) { return map[string]any{"ok": true}, nil }
	for i := range 4 {
		call := idemguard.Call{Tenant: "t", Scope: "s", ClientKey: fmt.Sprint("k-", i), Inputs: map[string]int{"i": i}}
		res, err := guard.Do(ctx, call, outage)
		require.NoError(t, err)
		require.Equal(t, idemguard.StatusFailed, res.Status)
		res, err = guard.Do(ctx, call, ok)
		require.NoError(t, err)
		require.Equal(t, idemguard.StatusSucceeded, res.Status)
		require.Equal(t, 2, res.Attempt)
	}
	require.NoError(t, rec.Flush(ctx))

	r, err := stats.Collect(ctx, d.DB, time.Hour)
	require.NoError(t, err)
	require.Equal(t, int64(4), r.Counts.Claims)
	require.Equal(t, int64(4), r.Counts.Retries)
	require.Zero(t, r.Counts.Takeovers)
	rate, hasData := r.TakeoverRate()
	require.True(t, hasData)
	require.Zero(t, rate, "4 retries after failures, no takeover")
	require.Empty(t, r.Check(stats.Thresholds{MaxTakeoverRate: 0.05, MinHitRate: 0, MaxFailureRate: 1}))
}
