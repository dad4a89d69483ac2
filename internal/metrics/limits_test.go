package metrics_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/metrics"
)

// The tenant label of limited_requests_total comes from the
// configuration: a tenant it does not name is (other), so no request can
// mint a series.
func TestLimitedTenantLabelsComeFromConfiguration(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	l := m.NewLimited([]string{"acme"}, []string{"job-limit", "rate-limit"})
	const name = "idemguard_limited_requests_total"
	require.Zero(t, value(t, m.Registry(), name, map[string]string{"tenant": "acme", "limit": "rate-limit"}), "exported from the start")
	require.Zero(t, value(t, m.Registry(), name, map[string]string{"tenant": metrics.OtherTenant, "limit": "job-limit"}))
	l.Observe("acme", "job-limit")
	for range 3 {
		l.Observe("minted-by-a-jwt", "job-limit")
	}
	require.EqualValues(t, 1, value(t, m.Registry(), name, map[string]string{"tenant": "acme", "limit": "job-limit"}))
	require.EqualValues(t, 3, value(t, m.Registry(), name, map[string]string{"tenant": metrics.OtherTenant, "limit": "job-limit"}))
	require.EqualValues(t, -1, value(t, m.Registry(), name, map[string]string{"tenant": "minted-by-a-jwt", "limit": "job-limit"}))
}
