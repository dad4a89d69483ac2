package routers

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-contrib/cors"
	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard/internal/engine"
	"github.com/idemguard/idemguard/internal/ops"
	"github.com/idemguard/idemguard/tenancy"
)

// Defaults of Options.
const (
	// DefaultMaxBodyBytes is the largest request body accepted (1 MiB).
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxWait caps Prefer: wait=N.
	DefaultMaxWait = 30 * time.Second
	// DefaultRetryAfter is the Retry-After of a 409 (operation in progress).
	DefaultRetryAfter = time.Second
	// DefaultUnavailableRetryAfter is the Retry-After of a 503.
	DefaultUnavailableRetryAfter = 5 * time.Second
	// ReadyTimeout bounds one call of Options.Ready.
	ReadyTimeout = 3 * time.Second
	// CORSMaxAge is how long browsers may cache a preflight answer.
	CORSMaxAge = 10 * time.Minute
)

// Options configure the API.
type Options struct {
	// Guard runs the operations. Required.
	Guard *engine.Guard
	// Scopes maps scope names to operations. Required.
	Scopes *ops.Registry
	// Auth authenticates tenants by API key. Required.
	Auth *tenancy.Authenticator
	// Ready reports readiness for /readyz (database reachable, migrations
	// applied); it is called with a context bounded by ReadyTimeout. nil
	// means always ready.
	Ready func(ctx context.Context) error
	// Metrics is served at /metrics; nil answers 404.
	Metrics http.Handler
	// MaxBodyBytes is the largest request body; larger ones get 413.
	// Defaults to DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// MaxWait caps Prefer: wait=N. Defaults to DefaultMaxWait (30s). The
	// engine's Config.MaxWait caps it too, so set that at least as high.
	MaxWait time.Duration
	// RetryAfter is the Retry-After of a 409 (in progress), rounded up to
	// whole seconds. Defaults to DefaultRetryAfter (1s).
	RetryAfter time.Duration
	// UnavailableRetryAfter is the Retry-After of a 503 (store down, not
	// ready), rounded up to whole seconds. Defaults to
	// DefaultUnavailableRetryAfter (5s).
	UnavailableRetryAfter time.Duration
	// CORSOrigins are the exact browser origins (scheme://host[:port]) allowed
	// to call the API. Empty: no CORS headers are sent. Requests from other
	// origins are served without CORS headers (the browser blocks them).
	CORSOrigins []string
	// Logger receives the request log. Defaults to slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	o.MaxBodyBytes = cmp.Or(o.MaxBodyBytes, DefaultMaxBodyBytes)
	o.MaxWait = cmp.Or(o.MaxWait, DefaultMaxWait)
	o.RetryAfter = cmp.Or(o.RetryAfter, DefaultRetryAfter)
	o.UnavailableRetryAfter = cmp.Or(o.UnavailableRetryAfter, DefaultUnavailableRetryAfter)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

func (o Options) validate() error {
	switch {
	case o.Guard == nil:
		return errors.New("routers: Options.Guard is required")
	case o.Scopes == nil:
		return errors.New("routers: Options.Scopes is required")
	case o.Auth == nil:
		return errors.New("routers: Options.Auth is required")
	case o.MaxBodyBytes < 0:
		return fmt.Errorf("routers: Options.MaxBodyBytes must not be negative, got %d (0 means the default of %d)", o.MaxBodyBytes, DefaultMaxBodyBytes)
	case o.MaxWait < 0:
		return fmt.Errorf("routers: Options.MaxWait must not be negative, got %s (0 means the default of %s)", o.MaxWait, DefaultMaxWait)
	case o.RetryAfter < 0:
		return fmt.Errorf("routers: Options.RetryAfter must not be negative, got %s (0 means the default of %s)", o.RetryAfter, DefaultRetryAfter)
	case o.UnavailableRetryAfter < 0:
		return fmt.Errorf("routers: Options.UnavailableRetryAfter must not be negative, got %s (0 means the default of %s)", o.UnavailableRetryAfter, DefaultUnavailableRetryAfter)
	}
	for i, origin := range o.CORSOrigins {
		if err := validateOrigin(origin); err != nil {
			return fmt.Errorf("routers: Options.CORSOrigins[%d] %q: %w", i, origin, err)
		}
	}
	return nil
}

// validateOrigin accepts an exact origin: http or https, a host, an optional
// port, nothing else.
func validateOrigin(origin string) error {
	if origin == "*" || strings.Contains(origin, "*") {
		return errors.New("wildcards are not allowed; list each origin exactly, e.g. https://app.example.com")
	}
	u, err := url.Parse(origin)
	if err != nil {
		return errors.New("not a URL; want scheme://host[:port], e.g. https://app.example.com")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("scheme must be http or https, e.g. https://app.example.com")
	case u.Host == "" || u.User != nil || u.Opaque != "":
		return errors.New("want scheme://host[:port], e.g. https://app.example.com")
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || strings.HasSuffix(origin, "?") || strings.HasSuffix(origin, "#"):
		return errors.New("an origin has no path, query or fragment (not even a trailing slash)")
	}
	return nil
}

// Header names of the API.
const (
	headerIdempotencyKey    = "Idempotency-Key"
	headerKeyRef            = "Idempotency-Key-Ref"
	headerReplayed          = "Idempotent-Replayed"
	headerCompletedAt       = "Idempotent-Completed-At"
	headerPrefer            = "Prefer"
	headerPreferenceApplied = "Preference-Applied"
	headerRetryAfter        = "Retry-After"
	headerLocation          = "Location"
)

// The routes, in gin syntax. docs/openapi.yaml documents each of them.
const (
	routeOps     = "/v1/ops/:scope"
	routeKey     = "/v1/ops/:scope/keys/:key"
	routeHealthz = "/healthz"
	routeReadyz  = "/readyz"
	routeMetrics = "/metrics"
)

// New validates o and returns the API's handler: gin in release mode,
// without gin's logger or recovery (the request log and the recovery are
// this package's own). It is safe for concurrent use.
func New(o Options) (http.Handler, error) {
	return newEngine(o)
}

func newEngine(o Options) (*gin.Engine, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	gin.SetMode(gin.ReleaseMode)

	r := gin.New()
	r.HandleMethodNotAllowed = true
	// A path that does not match is a 404, never a redirect (a redirected
	// POST would be re-sent by some clients as a GET).
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	// Nothing here reads the client IP; trust no forwarding header.
	if err := r.SetTrustedProxies(nil); err != nil {
		return nil, fmt.Errorf("routers: %w", err)
	}

	h := &handlers{
		guard:                 o.Guard,
		scopes:                o.Scopes,
		ready:                 o.Ready,
		metrics:               o.Metrics,
		maxBody:               o.MaxBodyBytes,
		maxWait:               o.MaxWait,
		retryAfter:            retryAfterSeconds(o.RetryAfter),
		unavailableRetryAfter: retryAfterSeconds(o.UnavailableRetryAfter),
		log:                   o.Logger,
	}

	r.Use(h.requestLog, h.recovery)
	if len(o.CORSOrigins) > 0 {
		r.Use(corsMiddleware(o.CORSOrigins))
	}
	r.NoRoute(h.noRoute)
	r.NoMethod(h.noMethod)

	r.GET(routeHealthz, h.healthz)
	r.GET(routeReadyz, h.readyz)
	r.GET(routeMetrics, h.serveMetrics)

	api := r.Group("/", h.authenticate(o.Auth))
	api.POST(routeOps, h.runOperation)
	api.GET(routeKey, h.lookupKey)
	return r, nil
}

// ExposedHeaders are the response headers a browser may read (CORS).
var ExposedHeaders = []string{
	headerReplayed, headerCompletedAt, headerKeyRef, headerLocation, headerRetryAfter, headerPreferenceApplied,
}

// AllowedHeaders are the request headers a browser may send (CORS).
var AllowedHeaders = []string{"Authorization", "Content-Type", headerIdempotencyKey, headerPrefer}

// corsMiddleware answers CORS for the listed origins. Requests from other
// origins pass through without CORS headers (gin-contrib/cors would answer
// them 403; the browser blocks them either way, and a server-side client
// that sends an Origin header is not hurt).
func corsMiddleware(origins []string) gin.HandlerFunc {
	// gin-contrib/cors lower-cases its list, then compares the request's
	// Origin exactly, answering 403 with an empty body on a mismatch. So
	// only an exact match of a lower-cased origin (what browsers send) goes
	// to it; any other spelling passes through like an unknown origin.
	allowed := make(map[string]bool, len(origins))
	for _, o := range origins {
		allowed[strings.ToLower(o)] = true
	}
	c := cors.New(cors.Config{
		AllowOrigins:     origins,
		AllowMethods:     []string{http.MethodGet, http.MethodPost, http.MethodOptions},
		AllowHeaders:     AllowedHeaders,
		ExposeHeaders:    ExposedHeaders,
		AllowCredentials: false, // bearer keys travel in a header, not in cookies
		MaxAge:           CORSMaxAge,
	})
	return func(ctx *gin.Context) {
		if origin := ctx.GetHeader("Origin"); origin == "" || !allowed[origin] {
			ctx.Next()
			return
		}
		c(ctx)
	}
}

// authenticate adapts tenancy's net/http middleware to gin: the tenant goes
// into the request context (tenancy.FromContext) and the gin context
// (tenantKey); a failure is a 401 problem.
func (h *handlers) authenticate(a *tenancy.Authenticator) gin.HandlerFunc {
	mw := a.Middleware(func(w http.ResponseWriter, r *http.Request, err error) {
		// The adapter below passes a *ginWriter as w: it carries the gin
		// context, so the 401 is written by fail like every other error.
		if c, ok := w.(*ginWriter); ok {
			h.fail(c.c, err)
		}
	})
	return func(c *gin.Context) {
		passed := false
		mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			passed = true
			c.Request = r
			if id, ok := tenancy.FromContext(r.Context()); ok {
				c.Set(tenantKey, id)
			}
			c.Next()
		})).ServeHTTP(&ginWriter{ResponseWriter: c.Writer, c: c}, c.Request)
		if !passed {
			c.Abort()
		}
	}
}

// ginWriter carries the gin context through tenancy's net/http middleware.
type ginWriter struct {
	gin.ResponseWriter
	c *gin.Context
}

// Keys of values handlers put into the gin context.
const (
	tenantKey     = "idemguard.tenant"
	scopeKey      = "idemguard.scope"
	keyHashKey    = "idemguard.key_hash"
	stopReasonKey = "idemguard.stop_reason"
	replayedKey   = "idemguard.replayed"
)

// handlers holds what the route handlers share.
type handlers struct {
	guard                 *engine.Guard
	scopes                *ops.Registry
	ready                 func(context.Context) error
	metrics               http.Handler
	maxBody               int64
	maxWait               time.Duration
	retryAfter            string
	unavailableRetryAfter string
	log                   *slog.Logger
}

// retryAfterSeconds renders d as a Retry-After value: whole seconds,
// rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	return fmt.Sprint(max(1, int64((d+time.Second-1)/time.Second)))
}
