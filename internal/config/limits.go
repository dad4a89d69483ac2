package config

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/idemguard/idemguard/tenancy"
)

// Defaults and bounds of Limits (per tenant and process).
const (
	DefaultLimitConcurrent = 64
	DefaultLimitJobs       = 32
	DefaultLimitRate       = 1000
	DefaultLimitBurst      = 2000
	MaxLimitCount          = 100_000
	MaxLimitRate           = 1_000_000
)

// EnvAllowInsecureUpstreams, set to true, allows http:// provider URLs in
// production (allow_insecure_upstreams).
const EnvAllowInsecureUpstreams = "IDEMGUARD_ALLOW_INSECURE_UPSTREAMS"

// Limits are the per-tenant limits of `serve` (docs/CONFIGURATION.md):
// over one, a request gets 429 with a problem type naming it.
type Limits struct {
	// Off turns every limit off.
	Off bool
	// Tenant is every tenant's limit.
	Tenant Limit
	// Tenants override Tenant for the tenants named; unset fields take
	// Tenant's.
	Tenants map[tenancy.ID]Limit
}

// Limit is one tenant's limit, or a scope's per tenant (Scope.Limits). -1
// means no limit; in a scope 0 means none of the scope's own.
type Limit struct {
	// Concurrent bounds the executions running at once (plain, streamed,
	// background); duplicates that join a running key and replays do not
	// count. Defaults to DefaultLimitConcurrent.
	Concurrent int
	// Jobs bounds the background executions among them. Defaults to
	// DefaultLimitJobs.
	Jobs int
	// Rate is the requests per second, Burst how many may come at once.
	// Default DefaultLimitRate and DefaultLimitBurst.
	Rate  float64
	Burst int
}

type rawLimits struct {
	rawLimit `yaml:",inline"`
	Off      bool                `yaml:"off"`
	Tenants  map[string]rawLimit `yaml:"tenants"`
}

type rawLimit struct {
	Concurrent *int     `yaml:"concurrent"`
	Jobs       *int     `yaml:"jobs"`
	Rate       *float64 `yaml:"rate"`
	Burst      *int     `yaml:"burst"`
}

// limit is r over def: the fields r sets, else def's.
func (r rawLimit) limit(def Limit) Limit {
	if r.Concurrent != nil {
		def.Concurrent = *r.Concurrent
	}
	if r.Jobs != nil {
		def.Jobs = *r.Jobs
	}
	if r.Rate != nil {
		def.Rate = *r.Rate
	}
	if r.Burst != nil {
		def.Burst = *r.Burst
	}
	return def
}

// limitsFromRaw fills c.Limits from raw, with the defaults.
func (c *Config) limitsFromRaw(raw rawLimits) {
	c.Limits = Limits{Off: raw.Off, Tenant: raw.limit(Limit{Concurrent: DefaultLimitConcurrent, Jobs: DefaultLimitJobs,
		Rate: DefaultLimitRate, Burst: DefaultLimitBurst})}
	if len(raw.Tenants) > 0 {
		c.Limits.Tenants = make(map[tenancy.ID]Limit, len(raw.Tenants))
	}
	for name, l := range raw.Tenants {
		c.Limits.Tenants[tenancy.ID(name)] = l.limit(c.Limits.Tenant)
	}
}

// validateTenantLimits checks the limits, each named by its setting.
func (c *Config) validateTenantLimits(p *problems) {
	checkLimit(p, "limits", c.Limits.Tenant, false)
	for tenant, l := range c.Limits.Tenants {
		at := "limits.tenants." + truncate(string(tenant), 64)
		if !tenant.Valid() {
			p.add(at, "is not a valid tenant id")
		}
		checkLimit(p, at, l, false)
	}
	for i, s := range c.Scopes {
		checkLimit(p, fmt.Sprintf("scopes[%d].limits", i), s.Limits, true)
	}
}

// checkLimit checks one limit; in a scope a zero adds no limit.
func checkLimit(p *problems, at string, l Limit, scope bool) {
	count := func(name string, n int) {
		if n == -1 || (scope && n == 0) || (n >= 1 && n <= MaxLimitCount) {
			return
		}
		p.add(at+"."+name, "must be between 1 and %d, or -1 (no limit), got %d", MaxLimitCount, n)
	}
	count("concurrent", l.Concurrent)
	count("jobs", l.Jobs)
	if !(l.Rate == -1 || (scope && l.Rate == 0) || (l.Rate > 0 && l.Rate <= MaxLimitRate)) {
		p.add(at+".rate", "must be requests per second above 0 and at most %d, or -1 (no limit), got %s",
			MaxLimitRate, strconv.FormatFloat(l.Rate, 'g', -1, 64))
	}
	if l.Burst < 0 || l.Burst > MaxLimitCount || (!scope && l.Burst == 0 && l.Rate > 0) {
		p.add(at+".burst", "must be between 1 and %d, got %d", MaxLimitCount, l.Burst)
	}
}

// checkProviderURL refuses an http:// provider URL in production, where
// it would carry the provider's key or the upstream's token in clear text,
// unless allow_insecure_upstreams is set.
func (c *Config) checkProviderURL(p *problems, setting, s string) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || c.Mode != Production || c.AllowInsecureUpstreams {
		return
	}
	p.add(setting, "must be an https:// URL in production: an http:// URL sends the provider's credential in clear text; "+
		"set allow_insecure_upstreams: true (or %s=true) only for an upstream on a trusted network, e.g. a sidecar",
		EnvAllowInsecureUpstreams)
}
