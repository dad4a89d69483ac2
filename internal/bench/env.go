package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/mysqlstore"
)

// options are the measuring settings every suite follows.
type options struct {
	// duration is the measured time of one case at one concurrency, split
	// into rounds.
	duration time.Duration
	// warmup is how long each case runs, unmeasured, before its rounds.
	warmup time.Duration
	// rounds is how many measured rounds each case gets; the median is reported.
	rounds int
	// concurrency lists the worker counts each suite measures at.
	concurrency []int
	// pool is the MaxOpenConns of every pool (mysqlconn.Open).
	pool int
	// httpCases selects the http suite's groups (fresh, replay, storm).
	httpCases string
}

func (o options) roundDuration() time.Duration { return o.duration / time.Duration(o.rounds) }

// env is what a suite runs against; see suites.go.
type env struct {
	log  *slog.Logger
	opts options
	// db is a pool on the bench database, shared by the raw and guarded cases
	// so that both use the same connections and pool size.
	db *sqlx.DB
	// dsn is the normalized DSN of the bench database.
	dsn string
	// secret keys the guards' HMACs (random per run).
	secret []byte
	// pprofDir, when set (-pgo, -stream-phases), is where the profiling
	// builds of serve and the floor write their net/http/pprof addresses
	// and serve records its CPU profiles (pgo.go).
	pprofDir string
	// recordCPU (-pgo): each serve process records its CPU profile.
	recordCPU bool
	// streamPhases (-stream-phases): the stream suite traces where a
	// stream's first event waits (phases.go).
	streamPhases bool
}

// newGuard returns a Guard on a mysqlstore over e.db with the default
// settings, changed by mutate if given. The caller closes it.
func (e *env) newGuard(mutate func(*idemguard.Config)) (*idemguard.Guard, error) {
	cfg := idemguard.Config{Store: mysqlstore.New(e.db), Secret: e.secret, Logger: e.log}
	if mutate != nil {
		mutate(&cfg)
	}
	return idemguard.New(cfg)
}

// compare measures cases at one concurrency under the same conditions: each
// warms up for opts.warmup, then they run opts.rounds rounds each of
// opts.duration/opts.rounds, interleaved (round r starts with case r mod n,
// so no case always runs first). Each case reports its median round, and a
// case whose baseline is among cases also the median of its per-round
// ratios (row.Paired).
func (e *env) compare(ctx context.Context, suiteName string, concurrency int, cases ...benchCase) ([]row, error) {
	for _, c := range cases {
		if e.opts.warmup > 0 {
			if _, err := e.runFor(ctx, concurrency, e.opts.warmup, c.op, c.cpu); err != nil {
				return nil, fmt.Errorf("%s/%s warm-up at concurrency %d: %w", suiteName, c.name, concurrency, err)
			}
		}
	}
	results := make([][]round, len(cases))
	for r := range e.opts.rounds {
		for k := range cases {
			i := (r + k) % len(cases)
			res, err := e.runFor(ctx, concurrency, e.opts.roundDuration(), cases[i].op, cases[i].cpu)
			if err != nil {
				return nil, fmt.Errorf("%s/%s at concurrency %d: %w", suiteName, cases[i].name, concurrency, err)
			}
			results[i] = append(results[i], res)
			e.log.Debug("bench: round", slog.String("suite", suiteName), slog.String("case", cases[i].name),
				slog.Int("concurrency", concurrency), slog.Int("round", r+1), slog.Float64("ops_per_sec", res.opsPerSec()))
		}
	}
	rows := make([]row, len(cases))
	for i, c := range cases {
		rows[i] = summarize(suiteName, c, concurrency, results[i])
		for j, b := range cases {
			if b.name == c.baseline {
				rows[i].Paired = pairedRatio(results[i], results[j])
			}
		}
		e.log.Info("bench: measured", slog.String("suite", suiteName), slog.String("case", c.name),
			slog.Int("concurrency", concurrency), slog.Float64("ops_per_sec", rows[i].OpsPerSec),
			slog.Duration("p50", rows[i].P50), slog.Duration("p99", rows[i].P99))
	}
	return rows, nil
}

// runFor runs op on concurrency workers until d has passed, and returns the
// operations finished, the time from the start to the last finish, the CPU
// time cpu counted meanwhile (this process's when cpu is nil) and each
// operation's latency. The first error stops every worker and is returned.
func (e *env) runFor(ctx context.Context, concurrency int, d time.Duration, op func(context.Context) error,
	cpu func() time.Duration) (round, error) {
	if concurrency < 1 {
		return round{}, fmt.Errorf("concurrency must be at least 1, got %d", concurrency)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lat := make([][]time.Duration, concurrency)
	var wg sync.WaitGroup
	if cpu == nil {
		cpu = processCPU
	}
	cpuStart, start := cpu(), time.Now()
	deadline := start.Add(d)
	for w := range concurrency {
		wg.Go(func() {
			own := make([]time.Duration, 0, 1024)
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(deadline) {
					break
				}
				if err := op(ctx); err != nil {
					cancel(err)
					break
				}
				own = append(own, time.Since(t0))
			}
			lat[w] = own
		})
	}
	wg.Wait()
	elapsed, used := time.Since(start), cpu()-cpuStart
	if err := context.Cause(ctx); err != nil {
		return round{}, err
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	return round{ops: len(all), elapsed: elapsed, cpu: used, latencies: all}, nil
}
