package routers

// The figures: GET {Prefix}/v1/stats (the caller's tenant's own figures, behind the API's
// authentication) and GET {Prefix}/ops (a page that draws figures, when Options.OpsPage is set;
// `idemguard serve` serves its operator page on the operator listener instead, never here).

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/tenancy"
)

// Routes of the operator's view, after Options.Prefix.
const (
	routeStats   = "/v1/stats"
	routeOpsPage = "/ops"
)

// Limits of GET /v1/stats?since=.
const (
	// DefaultStatsSince is the window answered without since: the last day.
	DefaultStatsSince = 24 * time.Hour
	// MinStatsSince is the shortest window answered.
	MinStatsSince = time.Minute
	// MaxStatsSince is the longest window answered: a week of hourly buckets is what a chart can
	// still show hour by hour.
	MaxStatsSince = 7 * 24 * time.Hour
)

// NoteNoHistory is the note of the answer when Options.Stats is nil.
const NoteNoHistory = "the in-memory store keeps no history: run serve with a MySQL database (mysql_dsn) for these figures"

// Stats is the answer of GET /v1/stats. Its JSON names are camelCase, like the rest of the API.
type Stats struct {
	// Tenant is the caller's tenant: Keys are its own.
	Tenant string `json:"tenant"`
	// Store is "mysql" or "memory".
	Store string `json:"store"`
	// From and To bound the window, in the database clock (RFC 3339, UTC); empty without a
	// database.
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// SinceSeconds is the window's length.
	SinceSeconds int64 `json:"sinceSeconds"`
	// Note says what the figures cover, or why there are none.
	Note string `json:"note"`
	// Scopes are the service-wide protocol counters per hour and scope, oldest first: only in
	// the operator's view (never in a tenant's answer, which holds its own figures only; an
	// empty list there).
	Scopes []ScopeHour `json:"scopes"`
	// Keys are the tenant's keys created per hour and scope, oldest first.
	Keys []KeyHour `json:"keys"`
}

// ScopeHour is one scope's protocol counters in one hour, all tenants together (the table
// idempotency_stats).
type ScopeHour struct {
	Hour        string `json:"hour"`
	Scope       string `json:"scope"`
	Requests    int64  `json:"requests"`
	Claims      int64  `json:"claims"`
	Retries     int64  `json:"retries"`
	Takeovers   int64  `json:"takeovers"`
	Replays     int64  `json:"replays"`
	InProgress  int64  `json:"inProgress"`
	RetryLimits int64  `json:"retryLimits"`
	Mismatches  int64  `json:"mismatches"`
	Failures    int64  `json:"failures"`
	LostClaims  int64  `json:"lostClaims"`
	StoreErrors int64  `json:"storeErrors"`
	// Resets are the finished keys run again on request (reset, or a forced run).
	Resets int64 `json:"resets"`
}

// KeyHour counts the tenant's keys of one scope created in one hour, by their status now.
type KeyHour struct {
	Hour      string `json:"hour"`
	Scope     string `json:"scope"`
	Created   int64  `json:"created"`
	Succeeded int64  `json:"succeeded"`
	Failed    int64  `json:"failed"`
	Started   int64  `json:"started"`
}

// StatsSource answers GET /v1/stats for one tenant over the last since: that tenant's own
// figures only (its keys; no service-wide counter, no other tenant's). An error wrapping
// idemguard.ErrStoreUnavailable is a 503.
type StatsSource interface {
	Stats(ctx context.Context, tenant tenancy.ID, since time.Duration) (Stats, error)
}

// opsRoutes adds the stats endpoint (authenticated by API key, like a scope not listed in
// ScopeAuth) and the page to r, the prefix group.
func (h *handlers) opsRoutes(r gin.IRouter, o Options) {
	src := o.Stats
	creds := &auth.Credentials{APIKeys: o.Auth}
	r.GET(routeStats, h.authenticateScope(creds, nil), func(c *gin.Context) { h.serveStats(c, src) })
	page := func(c *gin.Context) {
		if o.OpsPage == nil {
			h.fail(c, pipeline.Reject(pipeline.ErrUnknownRoute, "the operator page is not enabled on this server"))
			return
		}
		o.OpsPage.ServeHTTP(c.Writer, c.Request)
	}
	r.GET(routeOpsPage, page)
	r.HEAD(routeOpsPage, page)
}

// serveStats serves GET /v1/stats?since=24h: a Go duration from MinStatsSince to MaxStatsSince.
func (h *handlers) serveStats(c *gin.Context, src StatsSource) {
	tenant, ok := tenantOf(c)
	if !ok {
		h.fail(c, auth.ErrNoCredentials)
		return
	}
	since := DefaultStatsSince
	if v, given := c.GetQuery("since"); given {
		d, err := time.ParseDuration(v)
		if err != nil || d < MinStatsSince || d > MaxStatsSince {
			h.fail(c, pipeline.Reject(pipeline.ErrInvalidQuery, "since is a duration from %s to %s, e.g. since=24h", MinStatsSince, MaxStatsSince))
			return
		}
		since = d
	}
	stats := Stats{Tenant: string(tenant), Store: "memory", SinceSeconds: int64(since / time.Second),
		Note: NoteNoHistory, Scopes: []ScopeHour{}, Keys: []KeyHour{}}
	if src != nil {
		var err error
		if stats, err = src.Stats(c.Request.Context(), tenant, since); err != nil {
			// The cause stays in the log: it may name hosts.
			h.log.Warn("http: reading stats", slog.String("tenant", string(tenant)), slog.Any("err", err))
			h.fail(c, err)
			return
		}
	}
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusOK, pipeline.ContentJSON, pipeline.EncodeJSON(stats))
}
