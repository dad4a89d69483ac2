// Package stats counts what the guard does and reports the health figures operators alert on:
// cache hit rate, stale takeover rate, failure rate.
//
// # Where the replay count comes from
//
// A replay is the guard's fast path, and it stays read-only: no counter column on
// idempotency_keys is incremented per replay (that would turn every replay into a write, roughly
// halving replay throughput and taking a row lock on the hottest keys). Instead a [Recorder] in
// each server process counts engine events in memory ([Recorder.Observe], a few atomic adds) and
// adds them every [DefaultFlushEvery] to the table idempotency_stats, one row per (hour, scope),
// with INSERT ... ON DUPLICATE KEY UPDATE col = col + VALUES(col). Any number of replicas sum into
// the same rows. [Collect] reads the hourly rows for the request and replay counts and reads
// idempotency_keys for the per-key figures.
//
// Counting is per scope, not per tenant: idemguard.Event carries no tenant, and the alert
// thresholds are service-wide. Per-tenant figures would need the tenant on idemguard.Event and a
// tenant column in the key of idempotency_stats.
//
// # Accuracy
//
//   - The hour a count lands in is the database clock's hour at the flush that writes it
//     (UTC_TIMESTAMP(6), like every "now" in idemguard), so an event may land up to one flush
//     interval late, and counts kept through a failing database land in the hour of the flush
//     that finally succeeds. Ratios over a window are unaffected.
//   - Counts not yet flushed when a process dies (at most one interval; SIGKILL, OOM) are lost.
//     [Recorder.Run] flushes once more when its context is cancelled.
//   - If the database applies a flush but the reply is lost, the retry counts it twice. Rare,
//     and harmless for the rates.
package stats

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/internal/mysqlstore"
)

// Defaults for [RecorderOptions].
const (
	// DefaultFlushEvery is how often Run writes the counts.
	DefaultFlushEvery = 10 * time.Second
	// DefaultMaxScopes caps the distinct scopes a Recorder keeps counters for.
	DefaultMaxScopes = 10_000
	// DefaultFlushTimeout bounds one flush, the final one included.
	DefaultFlushTimeout = 5 * time.Second
)

// OverflowScope collects the counts of scopes beyond MaxScopes. The character '~' is not allowed
// in a scope, so it never collides with a real one.
const OverflowScope = "~other"

// Counts are the counters of one scope (or of a whole window, in a [Report]).
//
// Requests is the number of calls the guard answered: Claims + Retries + Takeovers + Replays +
// InProgress + RetryLimits + Mismatches. Invalid input and store failures are not requests.
// Failures and LostClaims count outcomes of the executions that Claims, Retries and Takeovers
// started. StoreErrors counts failed store calls, heartbeats included.
type Counts struct {
	Requests    int64 `json:"requests" db:"requests"`
	Claims      int64 `json:"claims" db:"claims"`
	Retries     int64 `json:"retries" db:"retries"`
	Takeovers   int64 `json:"takeovers" db:"takeovers"`
	Replays     int64 `json:"replays" db:"replays"`
	InProgress  int64 `json:"in_progress" db:"in_progress"`
	RetryLimits int64 `json:"retry_limits" db:"retry_limits"`
	Mismatches  int64 `json:"mismatches" db:"mismatches"`
	Failures    int64 `json:"failures" db:"failures"`
	LostClaims  int64 `json:"lost_claims" db:"lost_claims"`
	StoreErrors int64 `json:"store_errors" db:"store_errors"`
	// Resets counts the finished keys run again on request: reset, or replaced by a forced
	// run (the forced run's claim is counted in Claims too).
	Resets int64 `json:"resets" db:"resets"`
}

// counter indexes, in the column order of idempotency_stats (mysqlstore.StatsColumns).
const (
	cRequests = iota
	cClaims
	cRetries
	cTakeovers
	cReplays
	cInProgress
	cRetryLimits
	cMismatches
	cFailures
	cLostClaims
	cStoreErrors
	cResets
	numCounters
)

func (c *Counts) ptrs() [numCounters]*int64 {
	return [numCounters]*int64{&c.Requests, &c.Claims, &c.Retries, &c.Takeovers, &c.Replays, &c.InProgress,
		&c.RetryLimits, &c.Mismatches, &c.Failures, &c.LostClaims, &c.StoreErrors, &c.Resets}
}

func (c Counts) isZero() bool { return c == Counts{} }

// RecorderOptions configure a [Recorder]. The zero value is valid.
type RecorderOptions struct {
	// FlushEvery is how often Run writes the counts. Defaults to [DefaultFlushEvery].
	FlushEvery time.Duration
	// FlushTimeout bounds one flush, the final one included. Defaults to [DefaultFlushTimeout].
	FlushTimeout time.Duration
	// MaxScopes caps the distinct scopes counted separately; further scopes are counted under
	// [OverflowScope]. It bounds the Recorder's memory, also while flushes fail. Defaults to
	// [DefaultMaxScopes].
	MaxScopes int
	// Logger receives flush failures (once per outage) and recoveries. Defaults to slog.Default().
	Logger *slog.Logger
	// Cost prices a replay's avoided usage for its scope (nil, or 0: tokens only).
	Cost func(scope string, u idemguard.Usage) float64
}

func (o RecorderOptions) withDefaults() RecorderOptions {
	o.FlushEvery = cmp.Or(o.FlushEvery, DefaultFlushEvery)
	o.FlushTimeout = cmp.Or(o.FlushTimeout, DefaultFlushTimeout)
	o.MaxScopes = cmp.Or(o.MaxScopes, DefaultMaxScopes)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

func (o RecorderOptions) validate() error {
	switch {
	case o.FlushEvery < 0:
		return fmt.Errorf("stats: RecorderOptions.FlushEvery must be positive (0 for the default %s), got %s", DefaultFlushEvery, o.FlushEvery)
	case o.FlushTimeout < 0:
		return fmt.Errorf("stats: RecorderOptions.FlushTimeout must be positive (0 for the default %s), got %s", DefaultFlushTimeout, o.FlushTimeout)
	case o.MaxScopes < 0:
		return fmt.Errorf("stats: RecorderOptions.MaxScopes must be positive (0 for the default %d), got %d", DefaultMaxScopes, o.MaxScopes)
	}
	return nil
}

// Recorder counts engine events in memory and writes them to idempotency_stats.
//
// Wiring (idemguard serve): pass [Recorder.Observe] as idemguard.Config.Observe (composed with the
// Prometheus observer if there is one) and run [Recorder.Run] in a goroutine with a context of
// its own. On shutdown, cancel that context only after the Guard is closed (its in-flight
// operations still report events while they drain), then wait for Run to return: its final
// flush writes the last counts.
//
//	rec, err := stats.NewRecorder(db, stats.RecorderOptions{Logger: logger})
//	...
//	cfg.Observe = func(e idemguard.Event) { metrics.Observe(e); rec.Observe(e) }
//	recCtx, stopRec := context.WithCancel(context.Background())
//	recDone := make(chan error, 1)
//	go func() { recDone <- rec.Run(recCtx) }()
//	...
//	_ = guard.Close(shutdownCtx)
//	stopRec()
//	<-recDone
//
// A Recorder is safe for concurrent use. Observe never blocks and does no I/O.
type Recorder struct {
	sink       sink
	opts       RecorderOptions
	scopes     sync.Map // scope → *counters
	numScopes  atomic.Int64
	savings    sync.Map // SavingsKey → *savingsCounters
	numSavings atomic.Int64
	flushMu    sync.Mutex  // one flush at a time; Observe never takes it
	failing    atomic.Bool // a flush failed and none has succeeded since (logs once per outage)
}

type counters [numCounters]atomic.Int64

// sink writes one flush: per scope, the counts to add to the current hour's bucket. It either
// applies all of them or returns an error having applied none.
type sink interface {
	add(ctx context.Context, deltas map[string]Counts, savings map[SavingsKey]Savings) error
}

// NewRecorder returns a Recorder that flushes into the idempotency_stats table of db (migration
// 00002). db should come from mysqlconn.Open.
func NewRecorder(db *sqlx.DB, opts RecorderOptions) (*Recorder, error) {
	if db == nil {
		return nil, fmt.Errorf("stats: NewRecorder needs a database")
	}
	return newRecorder(sqlSink{db: db}, opts)
}

func newRecorder(s sink, opts RecorderOptions) (*Recorder, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Recorder{sink: s, opts: opts.withDefaults()}, nil
}

// Observe counts one engine event. It is meant to be idemguard.Config.Observe: a map lookup and one
// or two atomic adds, no lock on the hot path, no I/O.
func (r *Recorder) Observe(e idemguard.Event) {
	if e.Kind == idemguard.EventReplayed || e.Kind == idemguard.EventOperation {
		r.observeSavings(e)
	}
	var idx int
	request := true
	switch e.Kind {
	case idemguard.EventClaimed:
		idx = cClaims
	case idemguard.EventRetried:
		idx = cRetries
	case idemguard.EventTakeover:
		idx = cTakeovers
	case idemguard.EventReplayed:
		idx = cReplays
	case idemguard.EventInProgress:
		idx = cInProgress
	case idemguard.EventRetryLimit:
		idx = cRetryLimits
	case idemguard.EventMismatch:
		idx = cMismatches
	case idemguard.EventOperation:
		if !e.Failed {
			return
		}
		idx, request = cFailures, false
	case idemguard.EventLostClaim:
		idx, request = cLostClaims, false
	case idemguard.EventStoreError:
		idx, request = cStoreErrors, false
	case metrics.ResetKindReset, metrics.ResetKindForced:
		idx, request = cResets, false
	default: // waited, abandoned (followed by retry_limit): not counted
		return
	}
	c := r.counters(e.Scope)
	c[idx].Add(1)
	if request {
		c[cRequests].Add(1)
	}
}

func (r *Recorder) counters(scope string) *counters {
	if v, ok := r.scopes.Load(scope); ok {
		return v.(*counters)
	}
	if r.numScopes.Load() >= int64(r.opts.MaxScopes) {
		scope = OverflowScope
		if v, ok := r.scopes.Load(scope); ok {
			return v.(*counters)
		}
	}
	v, loaded := r.scopes.LoadOrStore(scope, new(counters))
	if !loaded {
		r.numScopes.Add(1)
	}
	return v.(*counters)
}

// Pending returns the counts observed and not yet flushed, by scope (scopes with no pending
// count are left out).
func (r *Recorder) Pending() map[string]Counts {
	out := map[string]Counts{}
	r.scopes.Range(func(k, v any) bool {
		var c Counts
		p := c.ptrs()
		for i := range v.(*counters) {
			*p[i] = v.(*counters)[i].Load()
		}
		if !c.isZero() {
			out[k.(string)] = c
		}
		return true
	})
	return out
}

// Flush writes the pending counts now. On error the counts are kept (added back) for the next
// flush, and the first failure of an outage is logged; the error is returned either way.
func (r *Recorder) Flush(ctx context.Context) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()

	// Take the counts: swap each counter to zero. Events observed meanwhile go to the next flush.
	deltas := map[string]Counts{}
	taken := map[string]*counters{}
	r.scopes.Range(func(k, v any) bool {
		cs := v.(*counters)
		var c Counts
		p := c.ptrs()
		for i := range cs {
			*p[i] = cs[i].Swap(0)
		}
		if !c.isZero() {
			deltas[k.(string)] = c
			taken[k.(string)] = cs
		}
		return true
	})
	savings, savingsTaken := r.takeSavings()
	if len(deltas) == 0 && len(savings) == 0 {
		return nil
	}

	ctx, cancel := context.WithTimeout(ctx, r.opts.FlushTimeout)
	defer cancel()
	if err := r.sink.add(ctx, deltas, savings); err != nil {
		giveBack(savings, savingsTaken)
		for scope, c := range deltas {
			p := c.ptrs()
			for i := range taken[scope] {
				taken[scope][i].Add(*p[i])
			}
		}
		if !r.failing.Swap(true) {
			r.opts.Logger.WarnContext(ctx, "stats: flush failed; counts kept for the next flush",
				slog.Int("scopes", len(deltas)), slog.Any("err", err))
		}
		return err
	}
	if r.failing.Swap(false) {
		r.opts.Logger.InfoContext(ctx, "stats: flush succeeded again", slog.Int("scopes", len(deltas)))
	}
	return nil
}

// Run flushes every FlushEvery until ctx is cancelled, then flushes once more (bounded by
// FlushTimeout) and returns that final flush's error. Failed periodic flushes are logged by
// Flush and retried at the next tick.
func (r *Recorder) Run(ctx context.Context) error {
	t := time.NewTicker(r.opts.FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return r.Flush(context.WithoutCancel(ctx))
		case <-t.C:
			_ = r.Flush(ctx)
		}
	}
}

// sqlSink adds counts to idempotency_stats and idempotency_savings through the MySQL store.
type sqlSink struct{ db *sqlx.DB }

// add writes the deltas in one transaction (mysqlstore.AddToCurrentHour), so that a failure
// leaves nothing applied and the caller can keep all of its counts.
func (s sqlSink) add(ctx context.Context, deltas map[string]Counts, savings map[SavingsKey]Savings) error {
	stats := make(map[string][]int64, len(deltas))
	for scope, c := range deltas {
		stats[scope] = c.values()
	}
	sv := make(map[SavingsKey][]int64, len(savings))
	for k, v := range savings {
		sv[k] = v.values()
	}
	if err := mysqlstore.AddToCurrentHour(ctx, s.db, stats, sv); err != nil {
		return fmt.Errorf("stats: flush %d scopes and %d tenant scopes: %w", len(deltas), len(savings), err)
	}
	return nil
}

// values are c's counters in mysqlstore.StatsColumns' order.
func (c Counts) values() []int64 {
	out := make([]int64, 0, numCounters)
	for _, p := range c.ptrs() {
		out = append(out, *p)
	}
	return out
}
