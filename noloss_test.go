package idemguard_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/internal/testkeys"
	"github.com/idemguard/idemguard/internal/testlog"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
)

const droppedMsg = "guard: a result field is not part of the stored envelope and was dropped; " +
	"put what callers need under data (primitive values) or return a sanitize.Envelope"

var noLossSecret = []byte("0123456789abcdef0123456789abcdef")

// noLossBundle is a Guard whose events feed the service's Prometheus
// metrics, with its logs in a buffer.
func noLossBundle(t *testing.T) (*idemguard.Guard, *metrics.Metrics, *testlog.Buffer) {
	t.Helper()
	logs := &testlog.Buffer{}
	m := metrics.New()
	g, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: noLossSecret,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		Observe: func(e idemguard.Event) {
			m.Observe(e)
		}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	return g, m, logs
}

// counterValue is the value of the counter name{labels} as /metrics
// exposes it; 0 when absent.
func counterValue(t *testing.T, m *metrics.Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, mt := range f.GetMetric() {
			got := map[string]string{}
			for _, lp := range mt.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue metric
				}
			}
			return mt.GetCounter().GetValue()
		}
	}
	return 0
}

// droppedCount is the fields dropped from scope's answers: counted per
// scope, the names only in the log.
func droppedCount(t *testing.T, m *metrics.Metrics, scope string) float64 {
	t.Helper()
	return counterValue(t, m, "idemguard_dropped_fields_total", map[string]string{"scope": scope, "kind": metrics.DroppedField})
}

func failureCount(t *testing.T, m *metrics.Metrics, scope, reason string) float64 {
	t.Helper()
	return counterValue(t, m, "idemguard_operation_failures_total", map[string]string{"scope": scope, "stop_reason": reason})
}

// Nothing is lost silently: every field the allowlist drops is logged (by
// name) and counted, and a result that is not an object is stored as a failure.
func TestNoSilentLoss(t *testing.T) {
	t.Parallel()
	t.Run("struct result: its fields are dropped, each logged once and counted", noLossStructResult)
	t.Run("string result: idemguard.ErrInvalidResult, stored failed unknown, retryable", noLossStringResult)
	t.Run("nested objects: dropped by name at any depth", noLossNestedObjects)
	t.Run("nil result: a success without data", noLossNilResult)
}

// noLossStructResult is a case of TestNoSilentLoss.
func noLossStructResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, m, logs := noLossBundle(t)
	type proposal struct {
		Copy  string `json:"copy"`
		Score int    `json:"score"`
	}
	for i := range 3 {
		res, err := g.Do(ctx, idemguard.Call{Tenant: "acme", Scope: "propose", Inputs: i},
			func(ctx context.Context) (any, error) { return proposal{Copy: "secret-value", Score: 7}, nil })
		require.NoError(t, err)
		require.Equal(t, idemguard.StatusSucceeded, res.Status)
		require.Equal(t, `{"ok":true,"stopReason":"completed","needsHuman":false,"cached":false}`, string(res.Body))
	}
	lines := logs.Lines(t, droppedMsg)
	require.Len(t, lines, 2, "once per (scope, field), not per call")
	fields := []any{lines[0]["field"], lines[1]["field"]}
	require.ElementsMatch(t, []any{"copy", "score"}, fields)
	require.Equal(t, "propose", lines[0]["scope"])
	require.NotContains(t, logs.String(), "secret-value", "never the value")
	require.EqualValues(t, 6, droppedCount(t, m, "propose"), "3 calls, 2 fields each")
}

// noLossStringResult is a case of TestNoSilentLoss.
func noLossStringResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, m, logs := noLossBundle(t)
	call := idemguard.Call{Tenant: "acme", Scope: "summarize", ClientKey: "k1"}
	res, err := g.Do(ctx, call, func(ctx context.Context) (any, error) { return "a summary", nil })
	require.ErrorIs(t, err, idemguard.ErrInvalidResult)
	require.Equal(t, idemguard.StatusFailed, res.Status)
	require.Equal(t, sanitize.Unknown, res.StopReason)
	require.Equal(t, http.StatusInternalServerError, res.StatusCode)
	require.ErrorIs(t, res.Err, idemguard.ErrInvalidResult)
	lines := logs.Lines(t, "guard: the operation's result is invalid (a programming error, not an upstream failure); stored as failed with stop reason unknown")
	require.Len(t, lines, 1)
	require.Equal(t, "string", lines[0]["value_type"])
	require.NotContains(t, logs.String(), "a summary")
	require.EqualValues(t, 0, failureCount(t, m, "summarize", "provider_error"))
	require.EqualValues(t, 1, failureCount(t, m, "summarize", "unknown"))

	info, err := g.Lookup(ctx, testkeys.Client(t, g, "acme", "summarize", "k1"))
	require.NoError(t, err)
	require.Equal(t, store.RowFailed, info.Status)
	require.Equal(t, http.StatusInternalServerError, info.StatusCode)

	res, err = g.Do(ctx, call, func(ctx context.Context) (any, error) {
		return map[string]any{"ok": true, "data": map[string]any{"summary": "fixed"}}, nil
	})
	require.NoError(t, err, "a corrected deploy runs the key again")
	require.Equal(t, 2, res.Attempt)
}

// noLossNestedObjects is a case of TestNoSilentLoss.
func noLossNestedObjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, m, logs := noLossBundle(t)
	res, err := g.Do(ctx, idemguard.Call{Tenant: "acme", Scope: "nested"}, func(ctx context.Context) (any, error) {
		return map[string]any{"ok": true, "debug": map[string]any{"prompt": "p"}, "data": map[string]any{
			"title": "kept", "details": map[string]any{"x": 1}, "tags": []any{"a", map[string]any{"b": 1}}}}, nil
	})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"title": "kept", "tags": []any{"a"}}, res.Envelope.Data)
	var fields []any
	for _, l := range logs.Lines(t, droppedMsg) {
		fields = append(fields, l["field"])
	}
	require.ElementsMatch(t, []any{"debug", "data.details", "data.tags[]"}, fields)
	require.EqualValues(t, 3, droppedCount(t, m, "nested"))
}

// noLossNilResult is a case of TestNoSilentLoss.
func noLossNilResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	g, _, _ := noLossBundle(t)
	var nilMap map[string]any
	for i, v := range []any{nil, nilMap, (*struct{})(nil)} {
		res, err := g.Do(ctx, idemguard.Call{Tenant: "acme", Scope: "nil", Inputs: i},
			func(ctx context.Context) (any, error) { return v, nil })
		require.NoError(t, err)
		require.Equal(t, idemguard.StatusSucceeded, res.Status)
		require.Equal(t, `{"ok":true,"stopReason":"completed","needsHuman":false,"cached":false}`, string(res.Body))
	}
	_, err := g.Do(ctx, idemguard.Call{Tenant: "acme", Scope: "nil", Inputs: "slice"},
		func(ctx context.Context) (any, error) { return []string{"a"}, nil })
	require.ErrorIs(t, err, idemguard.ErrInvalidResult)
}
