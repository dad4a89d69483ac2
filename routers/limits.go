package routers

// Per-tenant limits: concurrent executions, background jobs, request rate.

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/tenancy"
)

// Defaults of Limit, per tenant and process.
const (
	DefaultLimitConcurrent = 64
	DefaultLimitJobs       = 32
	DefaultLimitRate       = 1000
	DefaultLimitBurst      = 2000
	// MaxLimitedTenants bounds the tenants whose limits are counted apart
	// besides those named in Limits.Tenants (tenants of JWTs that no
	// setting names); past it they share one count.
	MaxLimitedTenants = 10_000
)

// maxEntries bounds the (tenant, scope) pairs tracked.
const maxEntries = 100_000

// Limit is what one tenant may use of one process: executions running at
// once, background jobs among them, and requests per second. -1 means no
// limit; in Limits.Tenant and Limits.Tenants a zero field takes the
// default, in Limits.Scopes it means no limit of the scope's own.
type Limit struct {
	// Concurrent bounds the tenant's executions running at once: plain,
	// streamed and background. A duplicate of a running key joins it and
	// a replay answers from the store: neither counts. Defaults to
	// DefaultLimitConcurrent.
	Concurrent int
	// Jobs bounds the background executions (Prefer: respond-async) among
	// them. Defaults to DefaultLimitJobs.
	Jobs int
	// Rate is the requests per second the tenant may send to the /v1/ops
	// routes, Burst how many may come at once (a token bucket). Default
	// DefaultLimitRate and DefaultLimitBurst.
	Rate  float64
	Burst int
}

// Limits are the per-tenant limits of the API (429 over them, with a
// problem type that names the limit and Retry-After). Every tenant gets
// Tenant, or its entry in Tenants; within a scope of Scopes a tenant is
// limited by that entry as well. Counts are per process.
type Limits struct {
	// Off turns every limit off.
	Off bool
	// Tenant is every tenant's limit; zero fields take the defaults.
	Tenant Limit
	// Tenants override Tenant for the tenants named, field by field.
	Tenants map[tenancy.ID]Limit
	// Scopes limit each tenant within the scope named as well; zero fields
	// add no limit.
	Scopes map[string]Limit
	// OnLimited, if set, is called for each request refused, with its
	// tenant and the limit (pipeline's Limit* names, the problem slugs).
	// The tenant comes from the credential: map tenants the configuration
	// does not name to one label before using it as a metric label.
	OnLimited func(tenant tenancy.ID, limit string)
	// Now is the clock of the rate (tests); defaults to time.Now.
	Now func() time.Time
}

// withDefaults fills a tenant's limit from def.
func (l Limit) withDefaults(def Limit) Limit {
	if l.Concurrent == 0 {
		l.Concurrent = def.Concurrent
	}
	if l.Jobs == 0 {
		l.Jobs = def.Jobs
	}
	if l.Rate == 0 {
		l.Rate = def.Rate
	}
	if l.Burst == 0 {
		l.Burst = def.Burst
	}
	return l
}

// counts is the state of one limit's holder: a tenant, or a tenant in a
// scope.
type counts struct {
	lim Limit

	mu      sync.Mutex
	running int
	jobs    int
	// keys are the keys holding places: the calls of one key (concurrent
	// duplicates racing for its claim) share one.
	keys map[string]place

	// tat is the rate's theoretical arrival time (GCRA), in nanoseconds of
	// the limiter's clock: a request is allowed while tat - now stays
	// within the burst.
	tat atomic.Int64
}

// place is the place of one key: how many calls share it, and whether it
// counts as a background job. Held by value in counts.keys: a claim
// allocates no place of its own.
type place struct {
	calls int
	job   bool
}

// take counts a call of keyHash in c, or names the limit it would pass. A
// call of a key that holds a place shares it.
func (c *counts) take(keyHash string, job bool, runLimit, jobLimit string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.keys[keyHash]; ok {
		p.calls++
		c.keys[keyHash] = p
		return ""
	}
	switch {
	case c.lim.Concurrent >= 0 && c.running >= c.lim.Concurrent:
		return runLimit
	case job && c.lim.Jobs >= 0 && c.jobs >= c.lim.Jobs:
		return jobLimit
	}
	if c.keys == nil {
		c.keys = map[string]place{}
	}
	c.keys[keyHash] = place{calls: 1, job: job}
	c.running++
	if job {
		c.jobs++
	}
	return ""
}

// give gives back a call's share of keyHash's place.
func (c *counts) give(keyHash string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.keys[keyHash]
	if !ok {
		return
	}
	if p.calls--; p.calls > 0 {
		c.keys[keyHash] = p
		return
	}
	delete(c.keys, keyHash)
	c.running--
	if p.job {
		c.jobs--
	}
}

// allow takes one request from the rate's bucket, or says how long to
// wait. Lock-free: one compare-and-swap.
func (c *counts) allow(now int64) (time.Duration, bool) {
	if c.lim.Rate < 0 {
		return 0, true
	}
	interval := int64(float64(time.Second) / c.lim.Rate)
	burst := int64(max(c.lim.Burst, 1)) * interval
	for {
		tat := c.tat.Load()
		next := max(tat, now) + interval
		if over := next - now - burst; over > 0 {
			return time.Duration(over), false
		}
		if c.tat.CompareAndSwap(tat, next) {
			return 0, true
		}
	}
}

// entry is what the limits hold for one tenant in one scope: the tenant's
// counts, the scope's (nil without a scope limit), and the admit functions
// of idemguard.Call.Admit, made once so that a request allocates nothing
// for its limits (only a claim does).
type entry struct {
	l       *limiter
	tenant  tenancy.ID
	own     *counts
	inScope *counts

	admitRun, admitJob func(keyHash string) (func(), error)
}

type entryKey struct {
	tenant tenancy.ID
	scope  string
}

// limiter is the state of Limits.
type limiter struct {
	lim Limits
	def Limit

	entries sync.Map // entryKey → *entry

	mu      sync.Mutex // makes entries; guards tracked and tenants
	tracked int
	tenants map[tenancy.ID]*counts
	other   *counts // the tenants past MaxLimitedTenants
}

func newLimiter(l Limits) *limiter {
	if l.Off {
		return nil
	}
	if l.Now == nil {
		l.Now = time.Now
	}
	def := l.Tenant.withDefaults(Limit{Concurrent: DefaultLimitConcurrent, Jobs: DefaultLimitJobs,
		Rate: DefaultLimitRate, Burst: DefaultLimitBurst})
	return &limiter{lim: l, def: def, tenants: make(map[tenancy.ID]*counts), other: &counts{lim: def}}
}

// of returns the entry of tenant in scope, made on first use. A request
// whose entry exists takes no lock (sync.Map) and allocates nothing.
func (l *limiter) of(tenant tenancy.ID, scope string) *entry {
	k := entryKey{tenant, scope}
	if e, ok := l.entries.Load(k); ok {
		return e.(*entry)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.entries.Load(k); ok {
		return e.(*entry)
	}
	e := &entry{l: l, tenant: tenant, own: l.countsOf(tenant)}
	e.admitRun = func(keyHash string) (func(), error) { return e.admit(keyHash, false) }
	e.admitJob = func(keyHash string) (func(), error) { return e.admit(keyHash, true) }
	if l.tracked >= maxEntries {
		return e // past the bound: the tenant's counts, no scope's
	}
	if sl, ok := l.lim.Scopes[scope]; ok {
		e.inScope = &counts{lim: scopeLimit(sl)}
	}
	l.entries.Store(k, e)
	l.tracked++
	return e
}

// scopeLimit is a scope's limit: zero fields add no limit.
func scopeLimit(l Limit) Limit {
	if l.Concurrent == 0 {
		l.Concurrent = -1
	}
	if l.Jobs == 0 {
		l.Jobs = -1
	}
	if l.Rate == 0 {
		l.Rate = -1
	}
	if l.Burst == 0 && l.Rate > 0 {
		l.Burst = max(1, int(2*l.Rate))
	}
	return l
}

// countsOf returns tenant's counts (under l.mu, locked).
func (l *limiter) countsOf(tenant tenancy.ID) *counts {
	if c, ok := l.tenants[tenant]; ok {
		return c
	}
	if len(l.tenants) >= MaxLimitedTenants+len(l.lim.Tenants) {
		return l.other
	}
	lim := l.def
	if tl, ok := l.lim.Tenants[tenant]; ok {
		lim = tl.withDefaults(l.def)
	}
	c := &counts{lim: lim}
	l.tenants[tenant] = c
	return c
}

// allow takes one request of tenant in scope from the rates, or refuses
// it with the limit it is over.
func (l *limiter) allow(tenant tenancy.ID, scope string) (*entry, error) {
	if l == nil {
		return nil, nil
	}
	e := l.of(tenant, scope)
	if e.own.lim.Rate < 0 && (e.inScope == nil || e.inScope.lim.Rate < 0) {
		return e, nil // no rate applies: no need of the clock
	}
	now := l.lim.Now().UnixNano()
	if wait, ok := e.own.allow(now); !ok {
		return e, l.refuse(tenant, pipeline.LimitRate, wait)
	}
	if e.inScope != nil {
		if wait, ok := e.inScope.allow(now); !ok {
			return e, l.refuse(tenant, pipeline.LimitScopeRate, wait)
		}
	}
	return e, nil
}

// refuse is the error of a request over limit; it is counted
// (Limits.OnLimited) where it is answered (noteLimited), once per request.
func (l *limiter) refuse(_ tenancy.ID, limit string, wait time.Duration) error {
	return &pipeline.LimitError{Limit: limit, RetryAfter: wait}
}

// noteLimited reports a request of tenant answered with err to
// Limits.OnLimited, if err is a limit's.
func (l *limiter) noteLimited(tenant tenancy.ID, err error) {
	var le *pipeline.LimitError
	if l != nil && l.lim.OnLimited != nil && errors.As(err, &le) {
		l.lim.OnLimited(tenant, le.Limit)
	}
}

// admission is the idemguard.Call.Admit of an execution of e (nil: no
// limits).
func (e *entry) admission(job bool) func(string) (func(), error) {
	switch {
	case e == nil:
		return nil
	case job:
		return e.admitJob
	}
	return e.admitRun
}

// admit takes a place for one execution of keyHash (a background one with
// job), shared with the other calls of the key that hold one.
func (e *entry) admit(keyHash string, job bool) (func(), error) {
	if limit := e.own.take(keyHash, job, pipeline.LimitConcurrent, pipeline.LimitJobs); limit != "" {
		return nil, e.l.refuse(e.tenant, limit, 0)
	}
	if e.inScope != nil {
		if limit := e.inScope.take(keyHash, job, pipeline.LimitScopeConcurrent, pipeline.LimitScopeJobs); limit != "" {
			e.own.give(keyHash)
			return nil, e.l.refuse(e.tenant, limit, 0)
		}
	}
	return func() { e.release(keyHash) }, nil
}

// release gives back the share admit took.
func (e *entry) release(keyHash string) {
	e.own.give(keyHash)
	if e.inScope != nil {
		e.inScope.give(keyHash)
	}
}

// LimitNames are the limits a request can be refused by, as
// Limits.OnLimited names them: the slugs of their problem types.
var LimitNames = pipeline.LimitNames
