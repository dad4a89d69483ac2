package stats

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/internal/testlog"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeSink records what it is given, or fails while err is set.
type fakeSink struct {
	mu      sync.Mutex
	err     error
	total   map[string]Counts
	flushes int
}

func (f *fakeSink) add(_ context.Context, deltas map[string]Counts, _ map[SavingsKey]Savings) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if f.total == nil {
		f.total = map[string]Counts{}
	}
	for scope, d := range deltas {
		t := f.total[scope]
		tp, dp := t.ptrs(), d.ptrs()
		for i := range tp {
			*tp[i] += *dp[i]
		}
		f.total[scope] = t
	}
	f.flushes++
	return nil
}

func (f *fakeSink) setErr(err error) { f.mu.Lock(); f.err = err; f.mu.Unlock() }

func (f *fakeSink) snapshot() (map[string]Counts, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]Counts{}
	for k, v := range f.total {
		out[k] = v
	}
	return out, f.flushes
}

type testBundle struct {
	rec  *Recorder
	sink *fakeSink
	log  *testlog.Buffer
}

func setup(t *testing.T, opts RecorderOptions) *testBundle {
	t.Helper()
	buf := &testlog.Buffer{}
	opts.Logger = slog.New(slog.NewJSONHandler(buf, nil))
	s := &fakeSink{}
	rec, err := newRecorder(s, opts)
	require.NoError(t, err)
	return &testBundle{rec: rec, sink: s, log: buf}
}

// observeAll feeds one of every event kind for scope.
func observeAll(r *Recorder, scope string) {
	for _, e := range []idemguard.Event{
		{Kind: idemguard.EventClaimed},
		{Kind: idemguard.EventOperation, Failed: false},
		{Kind: idemguard.EventRetried},
		{Kind: idemguard.EventOperation, Failed: true},
		{Kind: idemguard.EventTakeover},
		{Kind: idemguard.EventReplayed},
		{Kind: idemguard.EventReplayed, FromMemory: true},
		{Kind: idemguard.EventInProgress},
		{Kind: idemguard.EventWaited, Duration: time.Second},
		{Kind: idemguard.EventAbandoned},
		{Kind: idemguard.EventRetryLimit},
		{Kind: idemguard.EventMismatch},
		{Kind: idemguard.EventLostClaim},
		{Kind: idemguard.EventStoreError, StoreOp: "heartbeat"},
		{Kind: metrics.ResetKindReset},
		{Kind: metrics.ResetKindForced},
	} {
		e.Scope = scope
		r.Observe(e)
	}
}

// oneOfEach is what observeAll counts.
var oneOfEach = Counts{Requests: 8, Claims: 1, Retries: 1, Takeovers: 1, Replays: 2, InProgress: 1, RetryLimits: 1,
	Mismatches: 1, Failures: 1, LostClaims: 1, StoreErrors: 1, Resets: 2}

func TestObserveCountsEachRequestOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, RecorderOptions{})
	observeAll(b.rec, "a.scope")
	observeAll(b.rec, "a.scope")
	observeAll(b.rec, "b.scope")
	twice := oneOfEach
	p, q := twice.ptrs(), oneOfEach.ptrs()
	for i := range p {
		*p[i] = 2 * *q[i]
	}
	require.Equal(t, map[string]Counts{"a.scope": twice, "b.scope": oneOfEach}, b.rec.Pending())
	require.Equal(t, oneOfEach.Claims+oneOfEach.Retries+oneOfEach.Takeovers+oneOfEach.Replays+oneOfEach.InProgress+
		oneOfEach.RetryLimits+oneOfEach.Mismatches, oneOfEach.Requests, "requests are the answered calls")
}

func TestFlushHandsOverAndResets(t *testing.T) {
	t.Parallel()
	b := setup(t, RecorderOptions{})
	require.NoError(t, b.rec.Flush(t.Context()), "nothing to flush is not an error")
	_, flushes := b.sink.snapshot()
	require.Zero(t, flushes, "an empty flush writes nothing")

	observeAll(b.rec, "a")
	require.NoError(t, b.rec.Flush(t.Context()))
	require.Empty(t, b.rec.Pending())
	got, flushes := b.sink.snapshot()
	require.Equal(t, 1, flushes)
	require.Equal(t, map[string]Counts{"a": oneOfEach}, got)

	b.rec.Observe(idemguard.Event{Kind: idemguard.EventReplayed, Scope: "a"})
	require.NoError(t, b.rec.Flush(t.Context()))
	got, _ = b.sink.snapshot()
	want := oneOfEach
	want.Replays++
	want.Requests++
	require.Equal(t, map[string]Counts{"a": want}, got)
}

// A failed flush keeps the counts; the next successful flush writes them once. The outage is
// logged once, and the recovery once.
func TestFailedFlushKeepsCounts(t *testing.T) {
	t.Parallel()
	b := setup(t, RecorderOptions{})
	observeAll(b.rec, "a")
	b.sink.setErr(errors.New("database down"))
	for range 3 {
		require.ErrorContains(t, b.rec.Flush(t.Context()), "database down")
		observeAll(b.rec, "a")
	}
	require.Equal(t, 1, strings.Count(b.log.String(), `"msg":"stats: flush failed; counts kept for the next flush"`))
	require.Contains(t, b.log.String(), `"err":"database down"`)
	pending := b.rec.Pending()["a"]
	require.Equal(t, 4*oneOfEach.Requests, pending.Requests)

	b.sink.setErr(nil)
	require.NoError(t, b.rec.Flush(t.Context()))
	require.Empty(t, b.rec.Pending())
	got, flushes := b.sink.snapshot()
	require.Equal(t, 1, flushes)
	require.Equal(t, 4*oneOfEach.Replays, got["a"].Replays)
	require.Equal(t, 4*oneOfEach.Requests, got["a"].Requests)
	require.Equal(t, 1, strings.Count(b.log.String(), `"msg":"stats: flush succeeded again"`))

	// A new outage is logged again.
	b.sink.setErr(errors.New("down again"))
	observeAll(b.rec, "a")
	require.Error(t, b.rec.Flush(t.Context()))
	require.Equal(t, 2, strings.Count(b.log.String(), `"msg":"stats: flush failed; counts kept for the next flush"`))
}

// Scopes beyond MaxScopes are counted together under OverflowScope: memory stays bounded, and
// the totals stay right.
func TestMaxScopesFoldsTheRest(t *testing.T) {
	t.Parallel()
	b := setup(t, RecorderOptions{MaxScopes: 2})
	for _, s := range []string{"a", "b", "c", "d", "a"} {
		b.rec.Observe(idemguard.Event{Kind: idemguard.EventReplayed, Scope: s})
	}
	p := b.rec.Pending()
	require.Equal(t, map[string]Counts{
		"a":           {Requests: 2, Replays: 2},
		"b":           {Requests: 1, Replays: 1},
		OverflowScope: {Requests: 2, Replays: 2},
	}, p)
}

// Events observed from many goroutines while flushes run are each written exactly once.
func TestConcurrentObserveAndFlush(t *testing.T) {
	t.Parallel()
	b := setup(t, RecorderOptions{})
	const workers, perWorker = 8, 5000
	stop := make(chan struct{})
	flusherDone := make(chan struct{})
	go func() {
		defer close(flusherDone)
		for i := 0; ; i++ {
			// Every third flush fails: its counts must come back.
			if i%3 == 0 {
				b.sink.setErr(errors.New("flaky"))
			} else {
				b.sink.setErr(nil)
			}
			_ = b.rec.Flush(context.Background())
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			scope := []string{"x", "y"}[w%2]
			for range perWorker {
				b.rec.Observe(idemguard.Event{Kind: idemguard.EventReplayed, Scope: scope})
			}
		})
	}
	wg.Wait()
	close(stop)
	<-flusherDone
	b.sink.setErr(nil)
	require.NoError(t, b.rec.Flush(t.Context()))
	got, _ := b.sink.snapshot()
	require.Equal(t, int64(workers/2*perWorker), got["x"].Replays)
	require.Equal(t, int64(workers/2*perWorker), got["y"].Requests)
	require.Empty(t, b.rec.Pending())
}

// Run flushes on its ticker and once more when stopped.
func TestRunFlushesPeriodicallyAndOnStop(t *testing.T) {
	t.Parallel()
	b := setup(t, RecorderOptions{FlushEvery: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.rec.Run(ctx) }()

	b.rec.Observe(idemguard.Event{Kind: idemguard.EventClaimed, Scope: "a"})
	require.Eventually(t, func() bool {
		got, _ := b.sink.snapshot()
		return got["a"].Claims == 1
	}, 10*time.Second, 5*time.Millisecond, "a periodic flush writes the claim")

	b.rec.Observe(idemguard.Event{Kind: idemguard.EventReplayed, Scope: "a"})
	cancel()
	require.NoError(t, <-done)
	got, _ := b.sink.snapshot()
	require.Equal(t, Counts{Requests: 2, Claims: 1, Replays: 1}, got["a"], "the final flush writes the rest")
}

func TestRecorderOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		opts RecorderOptions
		want string
	}{
		{RecorderOptions{FlushEvery: -1}, "RecorderOptions.FlushEvery"},
		{RecorderOptions{FlushTimeout: -1}, "RecorderOptions.FlushTimeout"},
		{RecorderOptions{MaxScopes: -1}, "RecorderOptions.MaxScopes"},
	} {
		_, err := newRecorder(&fakeSink{}, tt.opts)
		require.ErrorContains(t, err, tt.want)
	}
	_, err := NewRecorder(nil, RecorderOptions{})
	require.ErrorContains(t, err, "needs a database")
}

// On MariaDB: flushes add into the current hour's row per scope, from several recorders (one per
// replica), and a flush into a missing table keeps the counts.
func TestSQLFlush(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := t.Context()
	logger := slog.New(slog.DiscardHandler)
	r1, err := NewRecorder(d.DB, RecorderOptions{Logger: logger})
	require.NoError(t, err)
	r2, err := NewRecorder(d.DB, RecorderOptions{Logger: logger})
	require.NoError(t, err)

	observeAll(r1, "scope.a")
	observeAll(r1, "scope.b")
	observeAll(r2, "scope.a")
	require.NoError(t, r1.Flush(ctx))
	require.NoError(t, r2.Flush(ctx))
	observeAll(r1, "scope.a")
	require.NoError(t, r1.Flush(ctx))

	type row struct {
		Counts
		Scope string    `db:"scope"`
		Start time.Time `db:"bucket_start"`
	}
	var rows []row
	require.NoError(t, d.DB.SelectContext(ctx, &rows, `SELECT bucket_start, scope, `+strings.Join(mysqlstore.StatsColumns(), ", ")+`
		FROM idempotency_stats ORDER BY bucket_start, scope`))
	sums := map[string]Counts{}
	for _, r := range rows {
		require.Equal(t, r.Start.Truncate(time.Hour), r.Start, "bucket_start is the start of an hour")
		var dbNow time.Time
		require.NoError(t, d.DB.GetContext(ctx, &dbNow, `SELECT UTC_TIMESTAMP(6)`))
		require.WithinDuration(t, dbNow, r.Start, time.Hour+time.Minute, "the database clock's hour")
		s := sums[r.Scope]
		sp, rp := s.ptrs(), r.Counts.ptrs()
		for i := range sp {
			*sp[i] += *rp[i]
		}
		sums[r.Scope] = s
	}
	three := oneOfEach
	p, q := three.ptrs(), oneOfEach.ptrs()
	for i := range p {
		*p[i] = 3 * *q[i]
	}
	require.Equal(t, map[string]Counts{"scope.a": three, "scope.b": oneOfEach}, sums)

	// Without the table, the flush fails and keeps the counts; with it back, they are written.
	_, err = d.DB.ExecContext(ctx, `RENAME TABLE idempotency_stats TO idempotency_stats_away`)
	require.NoError(t, err)
	observeAll(r1, "scope.c")
	require.Error(t, r1.Flush(ctx))
	require.Equal(t, oneOfEach, r1.Pending()["scope.c"])
	_, err = d.DB.ExecContext(ctx, `RENAME TABLE idempotency_stats_away TO idempotency_stats`)
	require.NoError(t, err)
	require.NoError(t, r1.Flush(ctx))
	var replays int64
	require.NoError(t, d.DB.GetContext(ctx, &replays, `SELECT SUM(replays) FROM idempotency_stats WHERE scope = 'scope.c'`))
	require.Equal(t, oneOfEach.Replays, replays)
}

func BenchmarkObserve(b *testing.B) {
	rec, err := newRecorder(&fakeSink{}, RecorderOptions{})
	require.NoError(b, err)
	e := idemguard.Event{Kind: idemguard.EventReplayed, Scope: "actionRequests.aiProposeCopy"}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rec.Observe(e)
		}
	})
}
