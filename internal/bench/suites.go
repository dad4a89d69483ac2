package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Adding a suite
//
// A suite is one family of measurements that runs against the shared bench
// database. To add one, put it in its own file and register it from init;
// nothing else in the program changes. For example internal/bench/cleanup.go
// ("claim p99 during a 100k-row cleanup vs idle") would be:
//
//	func init() {
//		register(suite{name: "cleanup", about: "claim latency while a cleanup runs vs idle", run: runCleanup})
//	}
//
//	func runCleanup(ctx context.Context, e *env) ([]row, error) {
//		// seed 100k expired rows with e.db, build a guard with e.newGuard,
//		// then for each c in e.opts.concurrency:
//		//   idle := benchCase{name: "claim-idle", op: ...}
//		//   busy := benchCase{name: "claim-during-cleanup", baseline: "claim-idle", op: ...}
//		//   rows = append(rows, e.compare(ctx, "cleanup", c, idle, busy)...)
//		// (or measure with e.runFor and build rows with summarize yourself).
//	}
//
// What a suite gets (env): e.db, a pool on the fresh, migrated bench database
// (mysqlconn.Open, default pool size unless -pool), e.dsn to open more pools
// on it, e.newGuard for a Guard on a mysqlstore over e.db, e.opts (round
// duration, rounds, warm-up, concurrency levels), e.log, and the measuring
// helpers e.compare (warm up, then interleaved rounds, median round per case)
// and e.runFor (one timed run). Rows a suite returns are printed in one table
// with every other suite's; a row with a baseline gets a throughput ratio
// against the baseline row of the same suite and concurrency. Use tenants or
// scopes of your own (the database is shared by every suite of one run), and
// close whatever you open before returning. Suites run in name order; select
// some with -suite.

// suite is one registered family of measurements.
type suite struct {
	// name selects the suite (-suite) and labels its rows.
	name string
	// about is the one-line description -list prints.
	about string
	// run measures and returns the suite's rows.
	run func(ctx context.Context, e *env) ([]row, error)
}

var registry []suite

// register adds s to the suites; it panics on a duplicate or empty name (a
// programming error, found at start).
func register(s suite) {
	if s.name == "" || s.run == nil || strings.ContainsAny(s.name, ", ") {
		panic(fmt.Sprintf("bench: invalid suite %q", s.name))
	}
	for _, have := range registry {
		if have.name == s.name {
			panic(fmt.Sprintf("bench: suite %q registered twice", s.name))
		}
	}
	registry = append(registry, s)
}

// selectSuites returns the suites named in list (comma separated; empty means
// all), in name order. An unknown name is an error that lists the known ones.
func selectSuites(all []suite, list string) ([]suite, error) {
	all = slices.Clone(all)
	slices.SortFunc(all, func(a, b suite) int { return strings.Compare(a.name, b.name) })
	if strings.TrimSpace(list) == "" {
		return all, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !slices.ContainsFunc(all, func(s suite) bool { return s.name == n }) {
			return nil, fmt.Errorf("-suite: unknown suite %q; known: %s", n, strings.Join(suiteNames(all), ", "))
		}
		want[n] = true
	}
	var out []suite
	for _, s := range all {
		if want[s.name] {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-suite: no suite named; known: %s", strings.Join(suiteNames(all), ", "))
	}
	return out, nil
}

func suiteNames(all []suite) []string {
	names := make([]string, len(all))
	for i, s := range all {
		names[i] = s.name
	}
	return names
}

// row is one line of the result table: one case at one concurrency, from
// its median round.
type row struct {
	Suite       string
	Case        string
	Concurrency int
	// Ops is the number of operations in the reported round.
	Ops       int
	OpsPerSec float64
	P50, P99  time.Duration
	// Spread is (max-min)/median of ops/s over the rounds: the noise.
	Spread float64
	// CPUPerOp is this process's CPU time per operation over all rounds
	// (the client side only; the server's work is not in it).
	CPUPerOp time.Duration
	// Baseline names the case (same suite and concurrency) this row's
	// throughput is divided by for the ratio column; "" for none.
	Baseline string
	// Paired is the median of the per-round ratios to the baseline (see
	// pairedRatio); 0 when not measured in the same compare call.
	Paired float64
	// Target is the minimum ratio this row should reach; 0 for none.
	Target float64
	// Note is free text printed after the table (e.g. a storm's statuses).
	Note string
}

// benchCase is one measured operation. op is called concurrently by the
// workers until the round ends; an error ends the round and the run.
type benchCase struct {
	name     string
	baseline string
	// targetRatio is the least ratio to baseline this case must reach; it
	// applies at targetConcurrency only.
	targetRatio float64
	op          func(ctx context.Context) error
	// cpu, when set, is the CPU clock the cpu/op column reads (e.g. a server
	// process's); nil is this process's.
	cpu func() time.Duration
}

// targetConcurrency is the concurrency at which a case's targetRatio is
// checked.
const targetConcurrency = 16

func (c benchCase) target(concurrency int) float64 {
	if concurrency == targetConcurrency {
		return c.targetRatio
	}
	return 0
}
