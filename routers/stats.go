package routers

// The operator's view: GET {Prefix}/v1/stats (the caller's figures, behind the API's
// authentication) and GET {Prefix}/ops (the page that draws them; a static shell that holds no
// figures, so it needs no credentials).

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard/internal/opsui"
	"github.com/idemguard/idemguard/tenancy"
)

// Routes of the operator's view, after Options.Prefix.
const (
	routeStats   = "/v1/stats"
	routeOpsPage = "/ops"
)

// StatsSource answers GET /v1/stats for one tenant over the last since. An error wrapping
// idemguard.ErrStoreUnavailable is a 503.
type StatsSource interface {
	Stats(ctx context.Context, tenant tenancy.ID, since time.Duration) (opsui.Stats, error)
}

// opsRoutes adds the stats endpoint (authenticated by API key, like a scope not listed in
// ScopeAuth) and the page to r, the prefix group.
func (h *handlers) opsRoutes(r gin.IRouter, o Options) {
	src := o.Stats
	if src == nil {
		src = opsui.Memory{}
	}
	creds := &tenancy.Credentials{APIKeys: o.Auth}
	r.GET(routeStats, h.authenticateScope(creds, nil), func(c *gin.Context) { h.serveStats(c, src) })
	page := gin.WrapH(opsui.Handler())
	r.GET(routeOpsPage, page)
	r.HEAD(routeOpsPage, page)
}

// serveStats serves GET /v1/stats?since=24h: a Go duration, 1m to opsui.MaxSince.
func (h *handlers) serveStats(c *gin.Context, src StatsSource) {
	tenant, ok := tenantOf(c)
	if !ok {
		h.fail(c, tenancy.ErrNoCredentials)
		return
	}
	since := opsui.DefaultSince
	if v, given := c.GetQuery("since"); given {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute || d > opsui.MaxSince {
			h.fail(c, reject(errInvalidQuery, "since is a duration from 1m to %s, e.g. since=24h", opsui.MaxSince))
			return
		}
		since = d
	}
	stats, err := src.Stats(c.Request.Context(), tenant, since)
	if err != nil {
		// The cause stays in the log: it may name hosts.
		h.log.Warn("http: reading stats", slog.String("tenant", string(tenant)), slog.Any("err", err))
		h.fail(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusOK, contentJSON, encodeJSON(stats))
}
