package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The benchmarks in overhead_test.go run Guards; their heartbeats must end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ms(n ...int) []time.Duration {
	out := make([]time.Duration, len(n))
	for i, v := range n {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	cases := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one value is every percentile", ms(7), 50, 7 * time.Millisecond},
		{"one value p99", ms(7), 99, 7 * time.Millisecond},
		{"p50 of an odd count is the middle", ms(1, 2, 3, 4, 5), 50, 3 * time.Millisecond},
		{"p50 of an even count is the lower middle", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p100 is the max", ms(1, 2, 3, 4), 100, 4 * time.Millisecond},
		{"tiny p is the min", ms(1, 2, 3, 4), 0.1, 1 * time.Millisecond},
		{"p0 is clamped to the min", ms(1, 2, 3, 4), 0, 1 * time.Millisecond},
		{"p50 of 1..100", hundred, 50, 50 * time.Millisecond},
		{"p99 of 1..100", hundred, 99, 99 * time.Millisecond},
		{"p99.9 of 1..100 rounds up", hundred, 99.9, 100 * time.Millisecond},
		{"p99 of 10 values is the max", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 99, 10 * time.Millisecond},
		{"p90 of 10 values", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 90, 9 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, percentile(c.sorted, c.p))
		})
	}
}

func TestMedianRoundPicksTheMiddleThroughputAndReportsSpread(t *testing.T) {
	t.Parallel()
	slow := round{ops: 100, elapsed: time.Second}
	mid := round{ops: 200, elapsed: time.Second, latencies: ms(5)}
	fast := round{ops: 300, elapsed: time.Second}

	got, spread := medianRound([]round{fast, slow, mid})
	require.Equal(t, mid.ops, got.ops)
	require.InDelta(t, 1.0, spread, 1e-9, "(300-100)/200")

	got, spread = medianRound([]round{fast, slow})
	require.Equal(t, slow.ops, got.ops, "of two rounds, the lower one (conservative)")
	require.InDelta(t, 2.0, spread, 1e-9)

	got, spread = medianRound([]round{mid})
	require.Equal(t, mid.ops, got.ops)
	require.Zero(t, spread)
}

func TestSummarizeSortsLatenciesOfTheMedianRound(t *testing.T) {
	t.Parallel()
	rounds := []round{
		{ops: 4, elapsed: time.Second, latencies: ms(9, 1, 5, 3)},
		{ops: 1, elapsed: time.Second, latencies: ms(100)},
		{ops: 10, elapsed: time.Second, latencies: ms(1)},
	}
	r := summarize("s", benchCase{name: "c", baseline: "b", targetRatio: 0.85}, targetConcurrency, rounds)
	require.Equal(t, 4, r.Ops)
	require.InDelta(t, 4.0, r.OpsPerSec, 1e-9)
	require.Equal(t, 3*time.Millisecond, r.P50)
	require.Equal(t, 9*time.Millisecond, r.P99)
	require.Equal(t, 0.85, r.Target)
	require.Equal(t, ms(9, 1, 5, 3), rounds[0].latencies, "the round's own latencies are not reordered")

	r = summarize("s", benchCase{name: "c", targetRatio: 0.85}, 1, rounds)
	require.Zero(t, r.Target, "the target applies at concurrency 16 only")
}

func TestWriteTableRatiosAndTargets(t *testing.T) {
	t.Parallel()
	rows := []row{
		{Suite: "fresh", Case: "raw", Concurrency: 16, OpsPerSec: 1000},
		{Suite: "fresh", Case: "guard", Concurrency: 16, OpsPerSec: 900, Baseline: "raw", Target: 0.85},
		{Suite: "replay", Case: "raw", Concurrency: 16, OpsPerSec: 1000},
		{Suite: "replay", Case: "guard", Concurrency: 16, OpsPerSec: 800, Baseline: "raw", Target: 0.85},
	}
	x, ok := ratio(rows, rows[1])
	require.True(t, ok)
	require.InDelta(t, 0.9, x, 1e-9)
	_, ok = ratio(rows, rows[0])
	require.False(t, ok, "a row without a baseline has no ratio")
	_, ok = ratio(rows, row{Suite: "fresh", Case: "x", Concurrency: 1, Baseline: "raw"})
	require.False(t, ok, "the baseline must be at the same concurrency")

	var out bytes.Buffer
	require.False(t, writeTable(&out, rows), "0.80 misses 0.85")
	require.Contains(t, out.String(), "= 0.90 (target >= 0.85) ok")
	require.Contains(t, out.String(), "= 0.80 (target >= 0.85) MISS")

	out.Reset()
	require.True(t, writeTable(&out, rows[:2]))
}

func TestFormatLatency(t *testing.T) {
	t.Parallel()
	require.Equal(t, "8.21µs", formatLatency(8210*time.Nanosecond))
	require.Equal(t, "324µs", formatLatency(324*time.Microsecond))
	require.Equal(t, "1.11ms", formatLatency(1110*time.Microsecond))
	require.Equal(t, "25.9ms", formatLatency(25900*time.Microsecond))
	require.Equal(t, "1200ms", formatLatency(1200*time.Millisecond))
	require.Equal(t, "0µs", formatLatency(0))
}

func TestParseConcurrency(t *testing.T) {
	t.Parallel()
	got, err := parseConcurrency("1, 16")
	require.NoError(t, err)
	require.Equal(t, []int{1, 16}, got)
	for _, bad := range []string{"", "0", "-1", "x", "1,,2", "5000"} {
		_, err := parseConcurrency(bad)
		require.Error(t, err, bad)
		require.ErrorContains(t, err, "-concurrency")
	}
}

func TestSelectSuites(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, *env) ([]row, error) { return nil, nil }
	all := []suite{{name: "replay", run: noop}, {name: "cleanup", run: noop}, {name: "fresh", run: noop}}

	got, err := selectSuites(all, "")
	require.NoError(t, err)
	require.Equal(t, []string{"cleanup", "fresh", "replay"}, suiteNames(got), "all, in name order")

	got, err = selectSuites(all, "replay,fresh")
	require.NoError(t, err)
	require.Equal(t, []string{"fresh", "replay"}, suiteNames(got))

	_, err = selectSuites(all, "fresh,nope")
	require.ErrorContains(t, err, `unknown suite "nope"; known: cleanup, fresh, replay`)
}

func TestRegisteredCoreSuites(t *testing.T) {
	t.Parallel()
	got, err := selectSuites(registry, "")
	require.NoError(t, err)
	require.Subset(t, suiteNames(got), []string{"fresh", "replay"})
}

func TestRunWithoutDSNFailsWithHelp(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"-quick"}, func(string) string { return "" }, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Empty(t, stdout.String())
	require.Contains(t, stderr.String(), EnvDSN)
	require.Contains(t, stderr.String(), EnvTestDSN)
}

func TestRunRejectsBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-rounds", "0"}, {"-duration", "0s"}, {"-concurrency", "0"}, {"-suite", "nope"}, {"-pool", "0"},
		{"-no-such-flag"}, {"extra"},
	} {
		var stdout, stderr bytes.Buffer
		dsn := func(string) string { return "root@tcp(127.0.0.1:1)/x" }
		require.Equal(t, 2, run(context.Background(), args, dsn, &stdout, &stderr), strings.Join(args, " "))
		require.NotEmpty(t, stderr.String(), strings.Join(args, " "))
	}
}

func TestServerDSNPrefersTheBenchVariable(t *testing.T) {
	t.Parallel()
	env := map[string]string{EnvDSN: " bench ", EnvTestDSN: "test"}
	dsn, from := serverDSN(func(k string) string { return env[k] })
	require.Equal(t, "bench", dsn)
	require.Equal(t, EnvDSN, from)

	delete(env, EnvDSN)
	dsn, from = serverDSN(func(k string) string { return env[k] })
	require.Equal(t, "test", dsn)
	require.Equal(t, EnvTestDSN, from)
}

func TestRunWithUnreachableServerSaysSo(t *testing.T) {
	t.Parallel()
	dsn := func(k string) string {
		if k == EnvDSN {
			return "root:s3cret@tcp(127.0.0.1:1)/test?timeout=2s"
		}
		return ""
	}
	for _, args := range [][]string{{"-quick"}, {"-ping"}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 1, run(context.Background(), args, dsn, &stdout, &stderr), args[0])
		require.Contains(t, stderr.String(), "cannot reach the MySQL server", args[0])
		require.Contains(t, stderr.String(), "is the server running? The DSN came from "+EnvDSN, args[0])
		require.NotContains(t, stderr.String(), "s3cret", "the password is redacted")
		require.Empty(t, stdout.String())
	}
}

func TestPairedRatioIsTheMedianOfPerRoundRatios(t *testing.T) {
	t.Parallel()
	perSec := func(ops ...int) []round {
		out := make([]round, len(ops))
		for i, n := range ops {
			out[i] = round{ops: n, elapsed: time.Second}
		}
		return out
	}
	// The load halves in round 2: raw and guard both drop, the ratio does not.
	guard := perSec(90, 45, 88)
	raw := perSec(100, 50, 100)
	require.InDelta(t, 0.9, pairedRatio(guard, raw), 1e-9)
	require.InDelta(t, 0.89, pairedRatio(perSec(90, 88), perSec(100, 100)), 1e-9, "even count: mean of the middle two")
	require.Zero(t, pairedRatio(guard, nil))
	require.Zero(t, pairedRatio(guard, perSec(0, 0, 0)), "no baseline throughput, no ratio")
}

func TestCPUPerOpSumsAllRounds(t *testing.T) {
	t.Parallel()
	rounds := []round{{ops: 10, cpu: 30 * time.Millisecond}, {ops: 30, cpu: 10 * time.Millisecond}}
	require.Equal(t, time.Millisecond, cpuPerOp(rounds))
	require.Zero(t, cpuPerOp(nil))
	require.Zero(t, cpuPerOp([]round{{ops: 5}}), "not measured")
}

func TestProcessCPUMoves(t *testing.T) {
	t.Parallel()
	before := processCPU()
	x := 0
	for i := range 50_000_000 {
		x += i
	}
	require.NotZero(t, x)
	require.Greater(t, processCPU(), before, "the loop used CPU time")
}
