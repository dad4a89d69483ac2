package routers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gin-contrib/cors"
	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/routers/middleware"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/tenancy"
)

// Defaults of Options: the middleware's.
const (
	// DefaultMaxBodyBytes is the largest request body accepted (1 MiB).
	DefaultMaxBodyBytes = middleware.DefaultMaxBodyBytes
	// DefaultMaxWait caps Prefer: wait=N.
	DefaultMaxWait = middleware.DefaultMaxWait
	// DefaultRetryAfter is the Retry-After of a 409 (operation in progress)
	// and of a 429.
	DefaultRetryAfter = middleware.DefaultRetryAfter
	// DefaultUnavailableRetryAfter is the Retry-After of a 503.
	DefaultUnavailableRetryAfter = middleware.DefaultUnavailableRetryAfter
	// ReadyTimeout bounds one call of Options.Ready.
	ReadyTimeout = 3 * time.Second
	// CORSMaxAge is how long browsers may cache a preflight answer.
	CORSMaxAge = 10 * time.Minute
)

// Scope is one operation the API serves at POST {Prefix}/v1/ops/{Name}.
type Scope struct {
	// Name is the scope, e.g. "chat" or "actionRequests.aiProposeCopy":
	// 1–255 characters of [A-Za-z0-9._:-].
	Name string
	// Settings are the scope's protocol settings (TTL, StaleAfter,
	// MaxAttempts, StalePolicy); zero fields take the Guard's defaults.
	Settings idemguard.Settings
	// KeyRequired makes the Idempotency-Key header mandatory (400 without
	// it); otherwise the key is derived from the body.
	KeyRequired bool
	// Timeout bounds one execution (0: none); it then fails with stopReason
	// timeout.
	Timeout time.Duration
	// Run is the operation, given the request's JSON body ({} when empty).
	// Its value is sanitized like any idemguard.Operation's; return an
	// *idemguard.OpError to say why it failed. Required.
	Run func(ctx context.Context, inputs json.RawMessage) (any, error)
	// Validate, when set, checks the body before the guard claims the key.
	// Return an *idemguard.InputError to name the fields that do not fit
	// the operation's schema: the answer is a 400 problem listing them
	// (errors: [{pointer, detail}]), nothing is stored or run, and the key
	// stays free for a corrected request. Any other error is a 400 that
	// names no field (its text is not shown: it may quote the body).
	Validate func(inputs json.RawMessage) error
	// Stream, when set, serves a body with "stream": true as server-sent
	// events (stream.go): it gets the body without its delivery members
	// ("stream", "stream_options", which are part of neither the key nor the
	// fingerprint), emits events built from allowlisted fields, and returns
	// the same value Run would. StreamReplay renders an answer stored
	// without events (the key was completed by Run) as events.
	Stream       func(ctx context.Context, inputs json.RawMessage, emit func(idemguard.Chunk)) (any, error)
	StreamReplay func(sanitize.Envelope) []idemguard.Chunk
	// Isolation is whose key space the scope's keys live in. Defaults to
	// IsolationAuto: each JWT caller (a user) its own, API-key callers the
	// tenant's.
	Isolation Isolation
	// Tenants, when set, are the only tenants that may use the scope: to
	// any other it is unknown (404, and no MCP tool). Empty: every tenant.
	Tenants []tenancy.ID
	// Async makes the scope's MCP tool start the operation in the
	// background and answer at once with the job's reference (mcp.go).
	Async bool
	// InputSchema is the JSON Schema (an object's) of the operation's
	// inputs, which its MCP tool describes; nil: any object.
	InputSchema json.RawMessage
}

// allows reports whether tenant may use s (Scope.Tenants).
func (s *Scope) allows(tenant tenancy.ID) bool {
	return len(s.Tenants) == 0 || slices.Contains(s.Tenants, tenant)
}

// Isolation says whose key space a scope's keys live in: the tenant's, or
// the authenticated principal's (idemguard.Call.Principal). In a
// principal's key space, lookups, events, cancels, history and replays see
// only that principal's keys: another user of the tenant sending the same
// body runs it afresh, and their Idempotency-Key of the same name is
// another key.
type Isolation string

// The isolations.
const (
	// IsolationAuto: per principal for JWT callers (the token's subject),
	// per tenant for API-key callers.
	IsolationAuto Isolation = "auto"
	// IsolationTenant: one key space for the whole tenant, whoever calls
	// (a browser's user may then see another user's keys of the scope).
	IsolationTenant Isolation = "tenant"
	// IsolationPrincipal: per principal for every caller: a JWT's subject,
	// an API key's name.
	IsolationPrincipal Isolation = "principal"
)

// ParseIsolation accepts "auto" (or ""), "tenant" or "principal".
func ParseIsolation(s string) (Isolation, error) {
	switch i := Isolation(s); i {
	case "":
		return IsolationAuto, nil
	case IsolationAuto, IsolationTenant, IsolationPrincipal:
		return i, nil
	}
	return "", fmt.Errorf("%q is not an isolation; use %s, %s or %s", s, IsolationAuto, IsolationTenant, IsolationPrincipal)
}

// Options configure the API.
type Options struct {
	// Guard runs the operations. Required.
	Guard *idemguard.Guard
	// Scopes are the operations served; names must be unique. Any other
	// scope is a 404.
	Scopes []Scope
	// Auth authenticates tenants by API key. Required.
	Auth *auth.Authenticator
	// Prefix is prepended to the /v1/ops routes (and to the Location they
	// answer), e.g. "/idempotency" serves POST /idempotency/v1/ops/{scope}.
	// Empty, or a path starting with "/" and not ending with one.
	Prefix string
	// Ready reports readiness for /readyz (database reachable, migrations
	// applied); it is called with a context bounded by ReadyTimeout. nil
	// means always ready.
	Ready func(ctx context.Context) error
	// Metrics is served at /metrics, outside CORS (no browser page of
	// another origin may read it); nil answers 404. Prefer serving it on a
	// listener of its own, apart from the one browsers reach, as `idemguard
	// serve` does (metrics_listen).
	Metrics http.Handler
	// MaxBodyBytes is the largest request body; larger ones get 413.
	// Defaults to DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// MaxWait caps Prefer: wait=N. Defaults to DefaultMaxWait (30s). The
	// engine's Config.MaxWait caps it too, so set that at least as high.
	MaxWait time.Duration
	// RetryAfter is the Retry-After of a 409 (in progress) and a 429, rounded up to
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
	// HTTPMetrics, if set, counts and times every request by route template and status class.
	HTTPMetrics HTTPMetrics
	// JWT verifies browsers' bearer JWTs for the scopes that accept them
	// (ScopeAuth). nil: no JWT is accepted.
	JWT *auth.JWTVerifier
	// ScopeAuth names, per scope, the credentials it accepts (API keys, JWTs
	// or both); a scope not listed accepts auth.DefaultMethods (API keys).
	ScopeAuth map[string][]auth.Method
	// CORSLoopback also allows every http://localhost[:port] and
	// http://127.0.0.1[:port] origin: development mode's default, so a
	// frontend dev server can call the API. Never set it in production.
	CORSLoopback bool
	// Page, when set, serves GET / and GET /assets/* (development mode's
	// demo page). nil: those paths are 404.
	Page http.Handler
	// Stats answers GET {Prefix}/v1/stats, the figures the operator page
	// draws. nil: an empty answer with NoteNoHistory (the in-memory store
	// keeps no history).
	Stats StatsSource
	// OpsPage, when set, serves GET {Prefix}/ops, the operator page. nil:
	// that path is a 404 problem.
	OpsPage http.Handler
	// AuthFailures limits failed authentications per client address
	// (authlimit.go); the zero value takes the defaults.
	AuthFailures AuthFailureLimit
	// Limits are the per-tenant limits (limits.go); the zero value takes
	// the defaults.
	Limits Limits
	// MCPPath, when set (e.g. "/mcp"), serves the MCP door there (after
	// Prefix): the Model Context Protocol over Streamable HTTP, where each
	// scope a caller may use is a tool (mcp.go). Empty: no MCP door.
	MCPPath string
	// Doors serve providers' wires (door.go) at their own prefixes, so
	// that the providers' SDKs reach the scopes by changing a base URL.
	Doors []Door
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
	if o.Prefix != "" && !validPath(o.Prefix) {
		return fmt.Errorf("routers: Options.Prefix %q must start with / and not end with one, without : * ? or #, e.g. /idempotency", o.Prefix)
	}
	seen := make(map[string]bool, len(o.Scopes))
	for i, s := range o.Scopes {
		if err := keys.ValidateScope(s.Name); err != nil {
			return fmt.Errorf("routers: Options.Scopes[%d] %q: %w", i, s.Name, err)
		}
		if err := s.Settings.Validate(); err != nil {
			return fmt.Errorf("routers: Options.Scopes[%d] %q: %w", i, s.Name, err)
		}
		switch {
		case s.Run == nil:
			return fmt.Errorf("routers: Options.Scopes[%d] %q has no Run", i, s.Name)
		case s.Timeout < 0:
			return fmt.Errorf("routers: Options.Scopes[%d] %q: Timeout must not be negative", i, s.Name)
		case seen[s.Name]:
			return fmt.Errorf("routers: Options.Scopes[%d]: scope %q is listed twice", i, s.Name)
		}
		if _, err := ParseIsolation(string(s.Isolation)); err != nil {
			return fmt.Errorf("routers: Options.Scopes[%d] %q: Isolation: %w", i, s.Name, err)
		}
		seen[s.Name] = true
	}
	if err := o.validateBrowser(); err != nil {
		return err
	}
	if err := o.validateMCP(); err != nil {
		return err
	}
	if err := o.validateDoors(); err != nil {
		return err
	}
	for i, origin := range o.CORSOrigins {
		if err := validateOrigin(origin); err != nil {
			return fmt.Errorf("routers: Options.CORSOrigins[%d] %q: %w", i, origin, err)
		}
	}
	return nil
}

// validPath reports whether p starts with / and does not end with one,
// without : * ? or #.
func validPath(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.HasSuffix(p, "/") && !strings.ContainsAny(p, ":*?#")
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

// The routes, in gin syntax (the /v1 ones after Options.Prefix).
// docs/openapi.yaml documents each of them.
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

// Register adds the operation routes — POST {Prefix}/v1/ops/:scope and
// GET {Prefix}/v1/ops/:scope/keys/:key — to r, a team's own gin engine or
// group, with the API's authentication, request log, recovery and (when
// Options.CORSOrigins is set) CORS on those routes only. Health, readiness,
// metrics and the answers for unknown routes stay r's own: Options.Ready
// and Options.Metrics are not used. The Location headers include r's base
// path when r is a *gin.Engine or *gin.RouterGroup.
func Register(r gin.IRouter, o Options) error {
	h, err := newHandlers(o)
	if err != nil {
		return err
	}
	if bp, ok := r.(interface{ BasePath() string }); ok {
		h.locationPrefix = strings.TrimSuffix(bp.BasePath(), "/") + h.prefix
	}
	mw := []gin.HandlerFunc{h.requestLog, h.recovery}
	if len(o.CORSOrigins) > 0 || o.CORSLoopback {
		mw = append(mw, corsMiddleware(o.CORSOrigins, o.CORSLoopback))
	}
	h.apiRoutes(r.Group(h.prefix, mw...), o)
	h.doorRoutes(r.Group("/", mw...), o)
	return nil
}

func newHandlers(o Options) (*handlers, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	scopes := make(map[string]*Scope, len(o.Scopes))
	for _, s := range o.Scopes {
		scopes[s.Name] = &s
	}
	return &handlers{
		guard:          o.Guard,
		scopes:         scopes,
		prefix:         o.Prefix,
		locationPrefix: o.Prefix,
		ready:          o.Ready,
		metrics:        o.Metrics,
		limits:         pipeline.Limits{MaxBody: o.MaxBodyBytes, MaxWait: o.MaxWait},
		answers:        pipeline.NewAnswers(o.RetryAfter, o.UnavailableRetryAfter, o.Logger),
		log:            o.Logger,
		authFails:      newAuthFailures(o.AuthFailures, o.Logger),
		tenantLimits:   newLimiter(o.Limits),
		keyActors:      &keyActors{},
	}, nil
}

// apiRoutes adds the /v1 routes to r, behind authentication. In OPTIONS
// preflights the CORS middleware answers before authentication.
func (h *handlers) apiRoutes(r gin.IRouter, o Options) {
	api := r.Group("/", h.authenticateScope(&auth.Credentials{APIKeys: o.Auth, JWT: o.JWT}, o.ScopeAuth))
	if o.MCPPath != "" {
		h.mcpRoutes(r, o) // mcp.go: authenticated per scope, as the routes below
	}
	api.POST(routeOps, h.runOperation)
	api.GET(routeKey, h.lookupKey)
	api.DELETE(routeKey, h.resetKey) // reset.go
	h.jobRoutes(api)
}

func newEngine(o Options) (*gin.Engine, error) {
	h, err := newHandlers(o)
	if err != nil {
		return nil, err
	}
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

	// The request log also feeds HTTPMetrics (middleware.go), before the
	// recovery, so a panic's 500 is counted too.
	h.httpMetrics = o.HTTPMetrics
	r.Use(h.requestLog, h.recovery)
	// Registered before the CORS middleware, which gin adds only to routes
	// registered after it: /metrics never answers a browser's origin.
	r.GET(routeMetrics, h.serveMetrics)
	if len(o.CORSOrigins) > 0 || o.CORSLoopback {
		r.Use(corsMiddleware(o.CORSOrigins, o.CORSLoopback))
	}
	r.NoRoute(h.noRoute)
	r.NoMethod(h.noMethod)

	r.GET(routeHealthz, h.healthz)
	r.GET(routeReadyz, h.readyz)
	r.HEAD(routeHealthz, h.healthz)
	r.HEAD(routeReadyz, h.readyz)
	if o.Page != nil {
		servePage(r, o.Page)
	}

	h.apiRoutes(r.Group(h.prefix), o)
	h.doorRoutes(r, o)
	h.opsRoutes(r.Group(h.prefix), o)
	if o.HTTPMetrics != nil {
		initHTTPMetrics(o.HTTPMetrics, r)
	}
	return r, nil
}

// ExposedHeaders are the response headers a browser may read (CORS).
var ExposedHeaders = []string{
	pipeline.HeaderReplayed, pipeline.HeaderCompletedAt, pipeline.HeaderKeyRef, pipeline.HeaderLocation, pipeline.HeaderRetryAfter, pipeline.HeaderPreferenceApplied,
	pipeline.HeaderStreamRestart, pipeline.HeaderExisting, pipeline.HeaderLink, pipeline.HeaderReplacesAttempt,
}

// AllowedHeaders are the request headers a browser may send (CORS).
var AllowedHeaders = []string{"Authorization", "Content-Type", pipeline.HeaderIdempotencyKey, pipeline.HeaderPrefer, headerLastEventID,
	pipeline.HeaderForceNew}

// corsMiddleware answers CORS for the listed origins (and, with loopback,
// any http://localhost or http://127.0.0.1 origin). Requests from other
// origins pass through without CORS headers (gin-contrib/cors would answer
// them 403; the browser blocks them either way, and a server-side client
// that sends an Origin header is not hurt).
func corsMiddleware(origins []string, loopback bool) gin.HandlerFunc {
	allowed := make(map[string]bool, len(origins))
	for _, o := range origins {
		allowed[strings.ToLower(o)] = true
	}
	c := cors.New(cors.Config{
		// The origin has been checked below before c runs.
		AllowOriginFunc:  func(string) bool { return true },
		AllowMethods:     []string{http.MethodGet, http.MethodPost, http.MethodOptions},
		AllowHeaders:     AllowedHeaders,
		ExposeHeaders:    ExposedHeaders,
		AllowCredentials: false, // bearer keys travel in a header, not in cookies
		MaxAge:           CORSMaxAge,
	})
	return func(ctx *gin.Context) {
		if origin := ctx.GetHeader("Origin"); origin == "" || !(allowed[strings.ToLower(origin)] || loopback && isLoopbackOrigin(origin)) {
			ctx.Next()
			return
		}
		c(ctx)
	}
}

// ProblemTypePrefix ("urn:idemguard:problem:") begins every problem type
// URI; the rest is the slug (docs/openapi.yaml lists them).
const ProblemTypePrefix = pipeline.ProblemTypePrefix

// handlers holds what the route handlers share.
type handlers struct {
	guard          *idemguard.Guard
	scopes         map[string]*Scope
	prefix         string // Options.Prefix
	locationPrefix string // what Location paths start with
	ready          func(context.Context) error
	metrics        http.Handler
	limits         pipeline.Limits
	answers        *pipeline.Answers // the one error and result writer
	log            *slog.Logger
	authFails      *authFailures // nil: no limit
	tenantLimits   *limiter      // nil: no limits
	httpMetrics    HTTPMetrics   // Options.HTTPMetrics on New's engine; nil on Register's routes
	keyActors      *keyActors    // the callers (tenant and audit actor) of API keys (callerOf, actorOf); shared by the doors' copies
}
