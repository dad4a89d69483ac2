package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/cleanup"
	"github.com/idemguard/idemguard/internal/cleanup/cleanuptest"
	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/tenancy"
)

// The cleanup suite answers "do live claims keep working while the daily
// cleanup deletes 100,000 expired rows?":
//
//   - claim-idle: Do on fresh keys, cleanupConcurrency workers,
//     no cleanup running; measured for half of -duration before the cleanup
//     and half after it, merged into one round (so drift of machine load
//     during the suite falls on both sides).
//   - claim-during-cleanup: the same calls while cleanup.Run (defaults: batches
//     of 1,000, 50ms pause) deletes the 100,000 rows, on a pool of its own as
//     the `idemguard cleanup` process would have; measured from the cleanup's
//     start to its end.
//   - cleanup-100k: the cleanup itself: rows/s over the whole run, and p50/p99
//     of one batch's DELETE.
//
// The target is claim p99 during cleanup at most cleanupP99Target times idle;
// the verdict is logged ("bench: cleanup verdict"), since the table's ratio
// column is throughput.

func init() {
	register(suite{name: "cleanup", about: "claim latency while cleanup deletes 100k expired rows vs idle; cleanup rows/s",
		run: runCleanupSuite})
}

const (
	// cleanupRows is how many expired rows the cleanup deletes.
	cleanupRows = 100_000
	// cleanupConcurrency is the number of claiming workers.
	cleanupConcurrency = 8
	// cleanupP99Target: claim p99 during cleanup / idle p99 must not exceed it.
	cleanupP99Target = 3.0
	// busySlice is how long one runFor call lasts while the cleanup runs.
	busySlice = 200 * time.Millisecond

	tenantCleanup = tenancy.ID("bench-cleanup")
	scopeCleanup  = "bench.cleanup"
)

func runCleanupSuite(ctx context.Context, e *env) ([]row, error) {
	start := time.Now()
	if err := cleanuptest.Seed(ctx, e.db, cleanuptest.Rows{Expired: cleanupRows}); err != nil {
		return nil, err
	}
	e.log.Info("bench: cleanup seeded", slog.Int("rows", cleanupRows), slog.Duration("took", time.Since(start)))

	g, err := e.newGuard(nil)
	if err != nil {
		return nil, err
	}
	defer closeGuard(g)
	var seq atomic.Int64
	claim := func(ctx context.Context) error {
		n := seq.Add(1)
		res, err := g.Do(ctx, idemguard.Call{Tenant: tenantCleanup, Scope: scopeCleanup,
			ClientKey: "cleanup-" + strconv.FormatInt(n, 10), Inputs: inputs{Doc: n, Text: textHash}}, noop)
		if err != nil {
			return err
		}
		if res.Status != idemguard.StatusSucceeded || res.Cached || res.LostClaim {
			return fmt.Errorf("fresh key answered status %s cached %t lost %t, want a fresh success", res.Status, res.Cached, res.LostClaim)
		}
		return nil
	}
	idleCase := benchCase{name: "claim-idle", op: claim}
	busyCase := benchCase{name: "claim-during-cleanup", baseline: idleCase.name, op: claim}
	c := cleanupConcurrency

	if e.opts.warmup > 0 {
		if _, err := e.runFor(ctx, c, e.opts.warmup, claim, nil); err != nil {
			return nil, fmt.Errorf("cleanup/claim warm-up: %w", err)
		}
	}
	idleBefore, err := e.runFor(ctx, c, e.opts.duration/2, claim, nil)
	if err != nil {
		return nil, fmt.Errorf("cleanup/claim-idle: %w", err)
	}

	// The cleanup runs on a pool of its own, like the separate `idemguard cleanup` process.
	cdb, err := mysqlconn.Open(ctx, e.dsn, mysqlconn.PoolConfig{MaxOpenConns: 2})
	if err != nil {
		return nil, err
	}
	defer cdb.Close()
	var (
		batchStart time.Time
		batchTimes []time.Duration
	)
	type result struct {
		sum cleanup.Summary
		err error
	}
	done := make(chan result, 1)
	batchStart = time.Now()
	go func() {
		sum, err := cleanup.Run(ctx, cdb, cleanup.Options{Logger: e.log,
			OnBatch: func(cleanup.Batch) { batchTimes = append(batchTimes, time.Since(batchStart)) },
			Sleep: func(ctx context.Context, d time.Duration) {
				t := time.NewTimer(d)
				defer t.Stop()
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				batchStart = time.Now()
			}})
		done <- result{sum, err}
	}()
	var busy []round
	var res result
	for finished := false; !finished; {
		r, err := e.runFor(ctx, c, busySlice, claim, nil)
		if err != nil {
			<-done
			return nil, fmt.Errorf("cleanup/claim-during-cleanup: %w", err)
		}
		busy = append(busy, r)
		select {
		case res = <-done:
			finished = true
		default:
		}
	}
	if res.err != nil {
		return nil, fmt.Errorf("cleanup run: %w", res.err)
	}
	if res.sum.Deleted != cleanupRows {
		return nil, fmt.Errorf("cleanup deleted %d rows, want %d", res.sum.Deleted, cleanupRows)
	}

	idleAfter, err := e.runFor(ctx, c, e.opts.duration/2, claim, nil)
	if err != nil {
		return nil, fmt.Errorf("cleanup/claim-idle: %w", err)
	}

	idle := summarize("cleanup", idleCase, c, []round{mergeRounds(idleBefore, idleAfter)})
	during := summarize("cleanup", busyCase, c, []round{mergeRounds(busy...)})
	slices.Sort(batchTimes)
	rate := float64(res.sum.Deleted) / res.sum.Duration.Seconds()
	del := row{Suite: "cleanup", Case: "cleanup-100k", Concurrency: 1, Ops: int(res.sum.Deleted), OpsPerSec: rate,
		P50: percentile(batchTimes, 50), P99: percentile(batchTimes, 99)}

	p99Ratio := float64(during.P99) / float64(idle.P99)
	verdict := "ok"
	if p99Ratio > cleanupP99Target {
		verdict = "MISS"
	}
	e.log.Info("bench: cleanup verdict", slog.Float64("claim_p99_during_over_idle", p99Ratio),
		slog.Float64("target_max", cleanupP99Target), slog.String("verdict", verdict),
		slog.Duration("idle_p99", idle.P99), slog.Duration("during_p99", during.P99),
		slog.Int64("deleted", res.sum.Deleted), slog.Int("batches", res.sum.Batches),
		slog.Duration("cleanup_duration", res.sum.Duration), slog.Float64("cleanup_rows_per_sec", rate))
	return []row{idle, during, del}, nil
}

// mergeRounds joins rounds of one case into one: operations, time and latencies add up.
func mergeRounds(rounds ...round) round {
	var out round
	for _, r := range rounds {
		out.ops += r.ops
		out.elapsed += r.elapsed
		out.cpu += r.cpu
		out.latencies = append(out.latencies, r.latencies...)
	}
	return out
}
