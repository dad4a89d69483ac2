package main

import (
	"context"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/config"
	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/internal/opsui"
	"github.com/idemguard/idemguard/routers"
)

// storeProbeEvery is how often serve pings the store for idemguard_store_up and
// idemguard_store_probe_duration_seconds: often enough that a 1m alert sees several probes,
// rare enough (one SELECT per replica) to cost the database nothing.
const storeProbeEvery = 10 * time.Second

// probeStore starts the periodic store probe and returns the function that stops it and waits
// for it to return.
func (s *server) probeStore(m *metrics.Metrics, guard *idemguard.Guard) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.ProbeStore(ctx, guard.Ping, storeProbeEvery, s.cfg.StoreTimeout)
	}()
	return func() { cancel(); <-done }
}

// creditAvoided counts a replay (from the store, the replay cache, or after a wait) as a call the
// guard avoided, with the tokens the stored answer's execution used and, where the scope names
// prices, their cost.
func creditAvoided(m *metrics.Metrics, cost func(string, idemguard.Usage) float64, e idemguard.Event) {
	if e.Kind == idemguard.EventReplayed {
		m.AvoidedCall(e.Scope, e.Usage.PromptTokens, e.Usage.CompletionTokens, cost(e.Scope, e.Usage))
	}
}

// scopeCost prices a scope's usage with the prices its configuration names (0 without).
func scopeCost(scopes []config.Scope) func(string, idemguard.Usage) float64 {
	prices := make(map[string]config.Prices, len(scopes))
	for _, s := range scopes {
		prices[s.Name] = s.Prices
	}
	return func(scope string, u idemguard.Usage) float64 { return prices[scope].Cost(u) }
}

// opsOptions sets the source of a tenant's own figures (GET /v1/stats on the API): the database
// when there is one; without, routers answers an empty series that says why. The operator page
// and the service-wide figures are on the operator listener (serve_operator.go), never here.
func (s *server) opsOptions(o *routers.Options, scopes []string) {
	if s.db != nil {
		o.Stats = opsui.NewMySQL(s.db, scopes)
	}
}
