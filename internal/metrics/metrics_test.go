package metrics_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard/internal/engine"
	"github.com/idemguard/idemguard/internal/memstore"
	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/sanitize"
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
	for _, e := range []engine.Event{
		{Kind: engine.EventClaimed, Scope: s},
		{Kind: engine.EventClaimed, Scope: s},
		{Kind: engine.EventReplayed, Scope: s},
		{Kind: engine.EventReplayed, Scope: s, FromMemory: true},
		{Kind: engine.EventReplayed, Scope: s, FromMemory: true},
		{Kind: engine.EventInProgress, Scope: s},
		{Kind: engine.EventWaited, Scope: s, Duration: 20 * time.Millisecond},
		{Kind: engine.EventTakeover, Scope: s},
		{Kind: engine.EventRetried, Scope: s},
		{Kind: engine.EventAbandoned, Scope: s, Reason: sanitize.Abandoned},
		{Kind: engine.EventRetryLimit, Scope: s, Reason: sanitize.RetryLimit},
		{Kind: engine.EventLostClaim, Scope: s},
		{Kind: engine.EventMismatch, Scope: s},
		{Kind: engine.EventOperation, Scope: s, Duration: 2 * time.Second},
		{Kind: engine.EventOperation, Scope: s, Duration: time.Second, Failed: true, Reason: sanitize.ProviderError},
		{Kind: engine.EventStoreError, Scope: s, StoreOp: "claim"},
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
	a.Observe(engine.Event{Kind: engine.EventClaimed, Scope: "only-in-a"})

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
	g, err := engine.New(engine.Config{Store: memstore.New(), Secret: []byte(strings.Repeat("s", 32)), Observe: m.Observe})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
	call := engine.Call{Tenant: "t", Scope: "demo", ClientKey: "k", Inputs: map[string]any{"a": 1}}
	op := func(context.Context) (any, error) { return map[string]any{"ok": true}, nil }

	for range 2 {
		_, err := g.WithIdempotency(context.Background(), call, op)
		require.NoError(t, err)
	}
	call.Inputs = map[string]any{"a": 2}
	_, err = g.WithIdempotency(context.Background(), call, op)
	require.ErrorIs(t, err, engine.ErrFingerprintMismatch)

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
