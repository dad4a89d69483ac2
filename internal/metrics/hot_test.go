package metrics_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/store"
)

// The series resolved at start (InitScopes, InitRoutes) count exactly what
// the vectors' own lookups count for a scope or route not named there.
func TestKeptSeriesCountLikeLookedUpOnes(t *testing.T) {
	t.Parallel()
	kept, looked := metrics.New(), metrics.New()
	kept.InitScopes("chat")
	kept.InitRoutes([]string{"/v1/ops/:scope"})
	for _, m := range []*metrics.Metrics{kept, looked} {
		m.Observe(idemguard.Event{Kind: idemguard.EventReplayed, Scope: "chat", FromMemory: true})
		m.Observe(idemguard.Event{Kind: idemguard.EventReplayed, Scope: "chat", FromMemory: true})
		m.Observe(idemguard.Event{Kind: idemguard.EventReplayed, Scope: "chat"})
		m.Observe(idemguard.Event{Kind: idemguard.EventClaimed, Scope: "chat"})
		m.Observe(idemguard.Event{Kind: idemguard.EventClaimed, Scope: "chat"})
		m.Observe(idemguard.Event{Kind: idemguard.EventOperation, Scope: "chat", Duration: 250 * time.Millisecond})
		m.Observe(idemguard.Event{Kind: idemguard.EventOperation, Scope: "chat", Duration: 3 * time.Second,
			Failed: true, StopReason: "timeout"})
		m.Observe(idemguard.Event{Kind: idemguard.EventOperation, Scope: "chat", Duration: 2 * time.Second})
		m.Observe(idemguard.Event{Kind: idemguard.EventAudit, Audit: &store.AuditEvent{Kind: store.AuditReplay}})
		m.Observe(idemguard.Event{Kind: idemguard.EventAudit, Audit: &store.AuditEvent{Kind: "not-a-kind"}})
		m.AvoidedCall("chat", 12, 8, 0.5)
		m.AvoidedCall("chat", -1, 3, 0)
		for _, status := range []int{200, 200, 302, 404, 503, 0, 600} {
			m.ObserveRequest("/v1/ops/:scope", status, time.Millisecond)
		}
	}
	require.Equal(t, nonZero(t, looked), nonZero(t, kept))
	got := nonZero(t, kept)
	for _, want := range []string{
		`idemguard_replays_total{from_memory="true",scope="chat"} 2`,
		`idemguard_replays_total{from_memory="false",scope="chat"} 1`,
		`idemguard_audit_events_total{kind="replay"} 1`,
		`idemguard_claims_total{scope="chat"} 2`,
		`idemguard_operations_total{outcome="succeeded",scope="chat"} 2`,
		`idemguard_operations_total{outcome="failed",scope="chat"} 1`,
		`idemguard_operation_failures_total{scope="chat",stop_reason="timeout"} 1`,
		`idemguard_operation_duration_seconds_count{scope="chat"} 3`,
		`idemguard_operation_duration_seconds_sum{scope="chat"} 5.25`,
		`idemguard_audit_events_total{kind="other"} 1`,
		`idemguard_avoided_calls_total{scope="chat"} 2`,
		`idemguard_avoided_tokens_total{kind="prompt",scope="chat"} 12`,
		`idemguard_avoided_tokens_total{kind="completion",scope="chat"} 11`,
		`idemguard_avoided_cost_total{scope="chat"} 0.5`,
		`idemguard_http_requests_total{route="/v1/ops/:scope",status_class="2xx"} 2`,
		`idemguard_http_requests_total{route="/v1/ops/:scope",status_class="other"} 2`,
		`idemguard_http_request_duration_seconds_count{route="/v1/ops/:scope",status_class="5xx"} 1`,
	} {
		require.Contains(t, got, want)
	}
}

// nonZero is the exposition of m's counters and histogram counts that are
// not zero, one sample a line, without the process's own metrics.
func nonZero(t *testing.T, m *metrics.Metrics) []string {
	t.Helper()
	families, err := m.Registry().Gather()
	require.NoError(t, err)
	var out []string
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "idemguard_") {
			continue
		}
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			name, v := f.GetName(), s.GetCounter().GetValue()
			if h := s.GetHistogram(); h != nil {
				name, v = name+"_count", float64(h.GetSampleCount())
				if sum := h.GetSampleSum(); sum != 0 {
					out = append(out, f.GetName()+"_sum{"+strings.Join(labels, ",")+"} "+strconv.FormatFloat(sum, 'g', -1, 64))
				}
			}
			if v != 0 {
				out = append(out, name+"{"+strings.Join(labels, ",")+"} "+strconv.FormatFloat(v, 'g', -1, 64))
			}
		}
	}
	return out
}
