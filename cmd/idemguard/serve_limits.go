package main

import (
	"github.com/idemguard/idemguard/internal/config"
	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/routers"
	"github.com/idemguard/idemguard/tenancy"
)

// limitOptions are the API's per-tenant limits of cfg, their refusals
// counted in m by tenant: the tenants cfg names, every other one as
// metrics.OtherTenant.
func limitOptions(cfg *config.Config, m *metrics.Metrics) routers.Limits {
	l := routers.Limits{Off: cfg.Limits.Off, Tenant: routerLimit(cfg.Limits.Tenant)}
	named := map[string]bool{}
	if cfg.Mode == config.Development {
		named[string(config.DemoTenant)] = true
	}
	for t := range cfg.APIKeys {
		named[string(t)] = true
	}
	if len(cfg.Limits.Tenants) > 0 {
		l.Tenants = make(map[tenancy.ID]routers.Limit, len(cfg.Limits.Tenants))
	}
	for t, tl := range cfg.Limits.Tenants {
		l.Tenants[t] = routerLimit(tl)
		named[string(t)] = true
	}
	for _, s := range cfg.Scopes {
		if s.Limits == (config.Limit{}) {
			continue
		}
		if l.Scopes == nil {
			l.Scopes = map[string]routers.Limit{}
		}
		l.Scopes[s.Name] = routerLimit(s.Limits)
	}
	tenants := make([]string, 0, len(named))
	for t := range named {
		tenants = append(tenants, t)
	}
	limited := m.NewLimited(tenants, routers.LimitNames)
	l.OnLimited = func(tenant tenancy.ID, limit string) { limited.Observe(string(tenant), limit) }
	return l
}

func routerLimit(l config.Limit) routers.Limit {
	return routers.Limit{Concurrent: l.Concurrent, Jobs: l.Jobs, Rate: l.Rate, Burst: l.Burst}
}
