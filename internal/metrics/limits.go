package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// OtherTenant is the tenant label of every tenant the configuration does
// not name: label values come from the configuration, never from a request.
const OtherTenant = "(other)"

// Limited counts the requests refused (429) by the per-tenant limits.
type Limited struct {
	vec    *prometheus.CounterVec
	labels map[string]bool
}

// NewLimited registers limited_requests_total{tenant,limit} on m, every
// series of tenants (the configured ones) and limits exported from the
// start at zero.
func (m *Metrics) NewLimited(tenants, limits []string) *Limited {
	l := &Limited{labels: make(map[string]bool, len(tenants)), vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "limited_requests_total",
		Help: "Requests refused (429) by a per-tenant limit, by tenant ((other) for a tenant the configuration does not name) and limit.",
	}, []string{"tenant", "limit"})}
	m.reg.MustRegister(l.vec)
	for _, t := range append(tenants, OtherTenant) {
		l.labels[t] = true
		for _, lim := range limits {
			l.vec.WithLabelValues(t, lim)
		}
	}
	return l
}

// Observe counts one refused request of tenant over limit.
func (l *Limited) Observe(tenant, limit string) {
	if !l.labels[tenant] {
		tenant = OtherTenant
	}
	l.vec.WithLabelValues(tenant, limit).Inc()
}
