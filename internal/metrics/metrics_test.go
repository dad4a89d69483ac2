package metrics_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// value returns the counter value or histogram sample count of the series
// name{labels}, or -1 when it does not exist.
func value(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			if len(got) != len(labels) {
				continue
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}

func TestObserveEveryEventKind(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	s := "chat"
	for _, e := range []idemguard.Event{
		{Kind: idemguard.EventClaimed, Scope: s},
		{Kind: idemguard.EventClaimed, Scope: s},
		{Kind: idemguard.EventReplayed, Scope: s},
		{Kind: idemguard.EventReplayed, Scope: s, FromMemory: true},
		{Kind: idemguard.EventReplayed, Scope: s, FromMemory: true},
		{Kind: idemguard.EventInProgress, Scope: s},
		{Kind: idemguard.EventWaited, Scope: s, Duration: 20 * time.Millisecond},
		{Kind: idemguard.EventTakeover, Scope: s},
		{Kind: idemguard.EventRetried, Scope: s},
		{Kind: idemguard.EventAbandoned, Scope: s, StopReason: sanitize.Abandoned},
		{Kind: idemguard.EventRetryLimit, Scope: s, StopReason: sanitize.RetryLimit},
		{Kind: idemguard.EventLostClaim, Scope: s},
		{Kind: idemguard.EventMismatch, Scope: s},
		{Kind: idemguard.EventOperation, Scope: s, Duration: 2 * time.Second},
		{Kind: idemguard.EventOperation, Scope: s, Duration: time.Second, Failed: true, StopReason: sanitize.ProviderError},
		{Kind: idemguard.EventStoreError, Scope: s, StoreOp: "claim"},
	} {
		m.Observe(e)
	}

	reg := m.Registry()
	sc := map[string]string{"scope": s}
	for name, want := range map[string]float64{
		"idemguard_claims_total":                 2,
		"idemguard_in_progress_total":            1,
		"idemguard_takeovers_total":              1,
		"idemguard_retries_total":                1,
		"idemguard_lost_claims_total":            1,
		"idemguard_fingerprint_mismatches_total": 1,
		"idemguard_operation_duration_seconds":   2,
		"idemguard_wait_seconds":                 1,
	} {
		require.Equal(t, want, value(t, reg, name, sc), name)
	}
	require.Equal(t, 1.0, value(t, reg, "idemguard_replays_total", map[string]string{"scope": s, "from_memory": "false"}))
	require.Equal(t, 2.0, value(t, reg, "idemguard_replays_total", map[string]string{"scope": s, "from_memory": "true"}))
	require.Equal(t, 1.0, value(t, reg, "idemguard_abandoned_total", map[string]string{"scope": s, "stop_reason": "abandoned"}))
	require.Equal(t, 1.0, value(t, reg, "idemguard_retry_limit_total", map[string]string{"scope": s, "stop_reason": "retry_limit"}))
	require.Equal(t, 1.0, value(t, reg, "idemguard_operations_total", map[string]string{"scope": s, "outcome": "succeeded"}))
	require.Equal(t, 1.0, value(t, reg, "idemguard_operations_total", map[string]string{"scope": s, "outcome": "failed"}))
	require.Equal(t, 1.0, value(t, reg, "idemguard_operation_failures_total", map[string]string{"scope": s, "stop_reason": "provider_error"}))
	require.Equal(t, 1.0, value(t, reg, "idemguard_store_errors_total", map[string]string{"scope": s, "op": "claim"}))
}

func TestHandlerServesTheOwnRegistry(t *testing.T) {
	t.Parallel()
	a, b := metrics.New(), metrics.New() // two instances never collide (no global registry)
	a.Observe(idemguard.Event{Kind: idemguard.EventClaimed, Scope: "only-in-a"})

	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `idemguard_claims_total{scope="only-in-a"} 1`)
	require.Contains(t, string(body), "go_goroutines", "runtime collectors are registered")

	require.Equal(t, -1.0, value(t, b.Registry(), "idemguard_claims_total", map[string]string{"scope": "only-in-a"}))
	require.NotPanics(t, func() { a.Handler(); a.Handler() }, "Handler may be called more than once")
}

// TestObserveFromTheGuard wires Observe into a real Guard: a claim, a
// replay from memory, an operation, a mismatch.
func TestObserveFromTheGuard(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	g, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: []byte(strings.Repeat("s", 32)), Observe: m.Observe})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
	call := idemguard.Call{Tenant: "t", Scope: "demo", ClientKey: "k", Inputs: map[string]any{"a": 1}}
	op := func(context.Context) (any, error) { return map[string]any{"ok": true}, nil }

	for range 2 {
		_, err := g.Do(context.Background(), call, op)
		require.NoError(t, err)
	}
	call.Inputs = map[string]any{"a": 2}
	_, err = g.Do(context.Background(), call, op)
	require.ErrorIs(t, err, idemguard.ErrFingerprintMismatch)

	reg := m.Registry()
	require.Equal(t, 1.0, value(t, reg, "idemguard_claims_total", map[string]string{"scope": "demo"}))
	require.Equal(t, 1.0, value(t, reg, "idemguard_replays_total", map[string]string{"scope": "demo", "from_memory": "true"}))
	require.Equal(t, 1.0, value(t, reg, "idemguard_operation_duration_seconds", map[string]string{"scope": "demo"}))
	require.Equal(t, 1.0, value(t, reg, "idemguard_fingerprint_mismatches_total", map[string]string{"scope": "demo"}))
}

func TestWriteCleanupTextfile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idemguard_cleanup.prom")
	at := time.Date(2026, 11, 20, 3, 0, 42, 0, time.UTC)
	require.NoError(t, metrics.WriteCleanupTextfile(path, metrics.CleanupRun{Deleted: 100050, Batches: 101, Duration: 7500 * time.Millisecond, OK: true, At: at}))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, line := range []string{
		"idemguard_cleanup_deleted_rows 100050",
		"idemguard_cleanup_batches 101",
		"idemguard_cleanup_duration_seconds 7.5",
		"idemguard_cleanup_success 1",
		"idemguard_cleanup_last_success_timestamp_seconds 1.795143642e+09",
	} {
		require.Contains(t, string(b), line+"\n")
	}
	// A failed run says so and does not claim a success time.
	require.NoError(t, metrics.WriteCleanupTextfile(path, metrics.CleanupRun{Deleted: 2000, Batches: 2, OK: false, At: at}))
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Contains(t, string(b), "idemguard_cleanup_success 0\n")
	require.NotContains(t, string(b), "last_success")
	require.Error(t, metrics.WriteCleanupTextfile(filepath.Join(t.TempDir(), "missing", "x.prom"), metrics.CleanupRun{}))
}

// scrape returns the idemguard_* sample lines of the /metrics text.
func scrape(t *testing.T, m *metrics.Metrics) []string {
	t.Helper()
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, w.Code)
	var out []string
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if strings.HasPrefix(line, metrics.Namespace+"_") {
			out = append(out, line)
		}
	}
	return out
}

// Every counter series is exported at zero before the first event, for every label value the
// observers can produce: a later event changes values, never the set of series.
func TestEverySeriesExportedFromTheStart(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.InitScopes("chat", "demo")
	m.InitRoutes([]string{"/v1/ops/:scope", "unmatched"})
	before := scrape(t, m)
	text := strings.Join(before, "\n") + "\n"
	for _, want := range []string{
		`idemguard_takeovers_total{scope="chat"} 0`,
		`idemguard_claims_total{scope="demo"} 0`,
		`idemguard_replays_total{from_memory="true",scope="chat"} 0`,
		`idemguard_store_errors_total{op="commit",scope="chat"} 0`,
		`idemguard_store_errors_total{op="heartbeat",scope="demo"} 0`,
		`idemguard_operation_failures_total{scope="chat",stop_reason="provider_error"} 0`,
		`idemguard_abandoned_total{scope="chat",stop_reason="abandoned"} 0`,
		`idemguard_retry_limit_total{scope="chat",stop_reason="timeout"} 0`,
		`idemguard_operations_total{outcome="failed",scope="demo"} 0`,
		`idemguard_operation_duration_seconds_count{scope="chat"} 0`,
		`idemguard_http_requests_total{route="/v1/ops/:scope",status_class="5xx"} 0`,
		`idemguard_http_requests_total{route="unmatched",status_class="4xx"} 0`,
		`idemguard_http_request_duration_seconds_count{route="/v1/ops/:scope",status_class="2xx"} 0`,
	} {
		require.Contains(t, text, want+"\n")
	}

	// Every event the guard emits, with every label value it can carry.
	var events []idemguard.Event
	for _, sc := range []string{"chat", "demo"} {
		for _, k := range []idemguard.EventKind{idemguard.EventClaimed, idemguard.EventInProgress, idemguard.EventWaited,
			idemguard.EventTakeover, idemguard.EventRetried, idemguard.EventLostClaim, idemguard.EventMismatch} {
			events = append(events, idemguard.Event{Kind: k, Scope: sc})
		}
		events = append(events, idemguard.Event{Kind: idemguard.EventReplayed, Scope: sc},
			idemguard.Event{Kind: idemguard.EventReplayed, Scope: sc, FromMemory: true},
			idemguard.Event{Kind: idemguard.EventOperation, Scope: sc})
		for _, r := range sanitize.StopReasons() {
			if r == sanitize.Completed || r == sanitize.InProgress || r == sanitize.NeedsHuman {
				continue
			}
			events = append(events, idemguard.Event{Kind: idemguard.EventAbandoned, Scope: sc, StopReason: r},
				idemguard.Event{Kind: idemguard.EventRetryLimit, Scope: sc, StopReason: r},
				idemguard.Event{Kind: idemguard.EventOperation, Scope: sc, Failed: true, StopReason: r})
		}
		for _, op := range metrics.StoreOps {
			events = append(events, idemguard.Event{Kind: idemguard.EventStoreError, Scope: sc, StoreOp: op})
		}
	}
	for _, e := range events {
		m.Observe(e)
	}
	for _, route := range []string{"/v1/ops/:scope", "unmatched"} {
		for _, status := range []int{200, 302, 404, 503} {
			m.ObserveRequest(route, status, time.Millisecond)
		}
	}
	after := scrape(t, m)
	require.Len(t, after, len(before), "an event created a series that was not exported from the start")
	require.NotEqual(t, before, after)
}

// storeOpsInEngine are the op names the engine's source passes to storeErr or puts in
// Event.StoreOp: StoreOps must name every one.
var storeOpsInEngine = regexp.MustCompile(`storeErr\([^,]+, [^,]+, "([^"]+)"|StoreOp: "([^"]+)"`)

func TestStoreOpsCoverTheEngine(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../*.go")
	require.NoError(t, err)
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range storeOpsInEngine.FindAllStringSubmatch(string(b), -1) {
			op := m[1] + m[2]
			if op == "reclaim " {
				continue
			}
			found++
			require.Contains(t, metrics.StoreOps, op, "%s names store op %q; add it to metrics.StoreOps", f, op)
		}
		// "reclaim "+kind.String(): every reclaim kind.
		if strings.Contains(string(b), `"reclaim "+`) {
			for _, k := range []store.ReclaimKind{store.ReclaimExpired, store.ReclaimStale, store.ReclaimFailed} {
				require.Contains(t, metrics.StoreOps, "reclaim "+k.String())
			}
		}
	}
	require.Greater(t, found, 3, "the pattern still finds the engine's store ops")
}

// TestAuditMetrics: every audit kind and every drop reason is exported from
// the start, at zero; the events and drops count into them, and a label
// value nobody listed is "other", never a new unbounded series.
func TestAuditMetrics(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	before := scrape(t, m)
	text := strings.Join(before, "\n") + "\n"
	for _, k := range store.AuditKinds() {
		require.Contains(t, text, `idemguard_audit_events_total{kind="`+string(k)+`"} 0`+"\n")
	}
	for _, want := range []string{
		`idemguard_audit_dropped_total{reason="queue_full",sink="store"} 0`,
		`idemguard_audit_dropped_total{reason="store",sink="store"} 0`,
		`idemguard_audit_dropped_total{reason="queue_full",sink="stream"} 0`,
		`idemguard_audit_dropped_total{reason="write_error",sink="stream"} 0`,
	} {
		require.Contains(t, text, want+"\n")
	}

	for _, k := range store.AuditKinds() {
		m.Observe(idemguard.Event{Kind: idemguard.EventAudit, Audit: &store.AuditEvent{Kind: k}})
	}
	m.Observe(idemguard.Event{Kind: idemguard.EventAudit, Audit: &store.AuditEvent{Kind: store.AuditReplay}})
	m.Observe(idemguard.Event{Kind: idemguard.EventAuditDropped, Scope: "chat", Field: "queue_full"})
	m.Observe(idemguard.Event{Kind: idemguard.EventAuditDropped, Scope: "chat", Field: "store"})
	m.Observe(idemguard.Event{Kind: idemguard.EventAuditDropped, Scope: "chat", Field: "store"})
	m.AuditStreamDropped(metrics.AuditDropQueueFull)
	m.AuditStreamDropped(metrics.AuditDropWriteError)
	m.AuditStreamDropped(metrics.AuditDropWriteError)
	m.AuditStreamDropped(metrics.AuditDropWriteError)
	reg := m.Registry()
	require.Equal(t, 2.0, value(t, reg, "idemguard_audit_events_total", map[string]string{"kind": "replay"}))
	require.Equal(t, 1.0, value(t, reg, "idemguard_audit_events_total", map[string]string{"kind": "claimed"}))
	for labels, want := range map[[2]string]float64{
		{"store", "queue_full"}: 1, {"store", "store"}: 2, {"stream", "queue_full"}: 1, {"stream", "write_error"}: 3,
	} {
		require.Equal(t, want, value(t, reg, "idemguard_audit_dropped_total", map[string]string{"sink": labels[0], "reason": labels[1]}), labels)
	}
	require.Len(t, scrape(t, m), len(before), "a known kind or reason created a series not exported from the start")

	m.Observe(idemguard.Event{Kind: idemguard.EventAudit, Audit: &store.AuditEvent{Kind: "made-up"}})
	m.Observe(idemguard.Event{Kind: idemguard.EventAuditDropped, Field: "made-up"})
	require.Equal(t, 1.0, value(t, reg, "idemguard_audit_events_total", map[string]string{"kind": "other"}))
	require.Equal(t, 1.0, value(t, reg, "idemguard_audit_dropped_total", map[string]string{"sink": "store", "reason": "other"}))
}

func TestAvoidedCallSeriesStartAtZero(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.InitScopes("chat")
	text := strings.Join(scrape(t, m), "\n") + "\n"
	for _, want := range []string{
		`idemguard_avoided_calls_total{scope="chat"} 0`,
		`idemguard_avoided_tokens_total{kind="prompt",scope="chat"} 0`,
		`idemguard_avoided_tokens_total{kind="completion",scope="chat"} 0`,
		`idemguard_avoided_cost_total{scope="chat"} 0`,
	} {
		require.Contains(t, text, want+"\n")
	}
}

func TestAvoidedCallAddsUp(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.InitScopes("chat")
	// Three replays of an answer that used 120 prompt and 30 completion tokens at 0.0015.
	for range 3 {
		m.AvoidedCall("chat", 120, 30, 0.0015)
	}
	// A scope without prices, and figures that would make a counter go down.
	m.AvoidedCall("chat", -5, 0, math.NaN())
	m.AvoidedCall("chat", 0, 0, -1)

	reg := m.Registry()
	require.Equal(t, 5.0, value(t, reg, "idemguard_avoided_calls_total", map[string]string{"scope": "chat"}))
	require.Equal(t, 360.0, value(t, reg, "idemguard_avoided_tokens_total", map[string]string{"scope": "chat", "kind": "prompt"}))
	require.Equal(t, 90.0, value(t, reg, "idemguard_avoided_tokens_total", map[string]string{"scope": "chat", "kind": "completion"}))
	require.InDelta(t, 0.0045, value(t, reg, "idemguard_avoided_cost_total", map[string]string{"scope": "chat"}), 1e-12)
}

func TestProbeStoreTracksTheStore(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	var down atomic.Bool
	var probes atomic.Int64
	ping := func(ctx context.Context) error {
		probes.Add(1)
		if down.Load() {
			return errors.New("connection refused")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.ProbeStore(ctx, ping, time.Millisecond, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })

	storeUp := func() string {
		for _, line := range scrape(t, m) {
			if v, ok := strings.CutPrefix(line, "idemguard_store_up "); ok {
				return v
			}
		}
		return "absent"
	}
	require.Eventually(t, func() bool { return storeUp() == "1" }, 10*time.Second, time.Millisecond)
	down.Store(true)
	require.Eventually(t, func() bool { return storeUp() == "0" }, 10*time.Second, time.Millisecond)
	down.Store(false)
	require.Eventually(t, func() bool { return storeUp() == "1" }, 10*time.Second, time.Millisecond)
	text := strings.Join(scrape(t, m), "\n")
	require.NotContains(t, text, "idemguard_store_probe_duration_seconds_count 0\n")
	require.Greater(t, probes.Load(), int64(2))
}
