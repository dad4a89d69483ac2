package metrics

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The series every cached replay or execution touches, resolved once: WithLabelValues
// hashes its label values and looks the series up under a lock on every
// call, and a replay answered from memory is cheap enough for that to
// show. The series of the scopes named in InitScopes and the routes named
// in InitRoutes are kept here; any other label value takes the vector's
// own lookup. No series is ever deleted from these vectors, so a kept one
// stays the exported one.

// scopeSeries are one scope's series that a replay or an execution
// touches.
type scopeSeries struct {
	replays           [2]prometheus.Counter // from_memory false, true
	claims            prometheus.Counter
	operations        [2]prometheus.Counter // outcome succeeded, failed
	opDuration        prometheus.Observer
	avoidedCalls      prometheus.Counter
	avoidedPrompt     prometheus.Counter
	avoidedCompletion prometheus.Counter
	avoidedCost       prometheus.Counter
}

// routeSeries are one route's series, by status class (StatusClasses).
type routeSeries struct {
	requests [4]prometheus.Counter
	duration [4]prometheus.Observer
}

// hot holds the resolved series: maps replaced whole when a scope or route
// is added (InitScopes, InitRoutes run at start), read without a lock.
type hot struct {
	mu     sync.Mutex // serializes the writers
	scopes atomic.Pointer[map[string]*scopeSeries]
	routes atomic.Pointer[map[string]*routeSeries]
	audit  map[string]prometheus.Counter // by audit kind, set in New
}

func (m *Metrics) keepScopes(scopes []string) {
	m.hot.mu.Lock()
	defer m.hot.mu.Unlock()
	next := map[string]*scopeSeries{}
	if cur := m.hot.scopes.Load(); cur != nil {
		next = maps.Clone(*cur)
	}
	for _, sc := range scopes {
		next[sc] = &scopeSeries{
			replays:           [2]prometheus.Counter{m.replays.WithLabelValues(sc, "false"), m.replays.WithLabelValues(sc, "true")},
			claims:            m.claims.WithLabelValues(sc),
			operations:        [2]prometheus.Counter{m.operations.WithLabelValues(sc, "succeeded"), m.operations.WithLabelValues(sc, "failed")},
			opDuration:        m.opDuration.WithLabelValues(sc),
			avoidedCalls:      m.avoidedCalls.WithLabelValues(sc),
			avoidedPrompt:     m.avoidedTokens.WithLabelValues(sc, "prompt"),
			avoidedCompletion: m.avoidedTokens.WithLabelValues(sc, "completion"),
			avoidedCost:       m.avoidedCost.WithLabelValues(sc),
		}
	}
	m.hot.scopes.Store(&next)
}

func (m *Metrics) keepRoutes(routes []string) {
	m.hot.mu.Lock()
	defer m.hot.mu.Unlock()
	next := map[string]*routeSeries{}
	if cur := m.hot.routes.Load(); cur != nil {
		next = maps.Clone(*cur)
	}
	for _, r := range routes {
		s := &routeSeries{}
		for i, class := range StatusClasses {
			s.requests[i] = m.httpRequests.WithLabelValues(r, class)
			s.duration[i] = m.httpDuration.WithLabelValues(r, class)
		}
		next[r] = s
	}
	m.hot.routes.Store(&next)
}

// scopeOf returns the kept series of scope, or nil.
func (m *Metrics) scopeOf(scope string) *scopeSeries {
	if p := m.hot.scopes.Load(); p != nil {
		return (*p)[scope]
	}
	return nil
}

// routeOf returns the kept series of route, or nil.
func (m *Metrics) routeOf(route string) *routeSeries {
	if p := m.hot.routes.Load(); p != nil {
		return (*p)[route]
	}
	return nil
}

// statusClass is the status_class label of status and its index in
// StatusClasses (-1 for "other").
func statusClass(status int) (string, int) {
	if status < 200 || status >= 600 {
		return "other", -1
	}
	i := status/100 - 2
	return StatusClasses[i], i
}
