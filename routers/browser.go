package routers

// What browsers need: credentials per scope (API keys for services, JWTs
// for browsers), loopback CORS origins in development mode, the demo page.

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard/internal/ctxkeys"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/tenancy"
)

// validateBrowser checks ScopeAuth against JWT.
func (o Options) validateBrowser() error {
	for scope, methods := range o.ScopeAuth {
		if len(methods) == 0 {
			return fmt.Errorf("routers: Options.ScopeAuth[%q] is empty; list %s, %s or both (or leave the scope out for API keys only)",
				scope, auth.MethodAPIKey, auth.MethodJWT)
		}
		for _, m := range methods {
			if _, err := auth.ParseMethod(string(m)); err != nil {
				return fmt.Errorf("routers: Options.ScopeAuth[%q]: %w", scope, err)
			}
			if m == auth.MethodJWT && o.JWT == nil {
				return fmt.Errorf("routers: Options.ScopeAuth[%q] accepts %s but Options.JWT is nil", scope, auth.MethodJWT)
			}
		}
	}
	return nil
}

// authenticateScope authenticates the request by the credentials its scope
// accepts (auth.DefaultMethods when the scope is not listed, or unknown).
// The tenant goes into the request context (tenancy.FromContext) and the
// request log (logOf); the caller's actor (actorOf) into the request context
// (idemguard.WithActor), where every guarded call of the request finds it. A failure is a 401 problem; its reason (never the
// token) is logged.
func (h *handlers) authenticateScope(creds *auth.Credentials, byScope map[string][]auth.Method) gin.HandlerFunc {
	return func(c *gin.Context) {
		if h.refuseBlocked(c) {
			return
		}
		scope := c.Param("scope")
		p, err := creds.AuthenticateScope(c.Request.Context(), c.Request, scope, byScope[scope])
		if err != nil {
			h.authFailed(c, err, true)
			return
		}
		principal, err := h.principalOf(p, scope)
		if err != nil {
			h.authFailed(c, err, false) // a valid token the scope cannot key: not a guess
			return
		}
		// tenancy.WithTenant and idemguard.WithActor, in one node.
		c.Request = c.Request.WithContext(h.callerOf(p).In(c.Request.Context()))
		f := logOf(c)
		f.tenant, f.auth, f.principal = p.Tenant, string(p.Method), principal
		c.Next()
	}
}

// authFailed answers a request whose credential err refused: a 401 problem
// with its challenge, with count counted against the client when the
// credential was wrong (not missing); its reason (never the token) is
// logged.
func (h *handlers) authFailed(c *gin.Context, err error, count bool) {
	if count && errors.Is(err, auth.ErrInvalidCredentials) { // a wrong credential, not a missing one
		h.authFails.failed(clientHost(c.Request))
	}
	h.log.Info("http: authentication failed", slog.String("route", c.FullPath()), slog.String("reason", err.Error()))
	c.Header("WWW-Authenticate", auth.Challenge(err))
	h.fail(c, err)
}

// principalOf is the key space of p's calls to scope (Scope.Isolation):
// "" for the tenant's, else "jwt:" and the token's subject or "key:" and
// the API key's name (idemguard.Call.Principal, which only an HMAC ever
// keeps). A JWT without a subject cannot have keys of its own: on a scope
// whose keys are per principal it is refused.
func (h *handlers) principalOf(p auth.Principal, scope string) (string, error) {
	isolation := IsolationAuto
	if s, ok := h.scopes[scope]; ok && s.Isolation != "" {
		isolation = s.Isolation
	}
	switch {
	case isolation == IsolationTenant, p.Method == auth.MethodAPIKey && isolation == IsolationAuto:
		return "", nil
	case p.Method == auth.MethodJWT && p.Subject == "":
		return "", &auth.Error{Reason: auth.ReasonMissingClaim, Err: errors.New("jwt: no sub claim, and the scope keeps keys per user")}
	}
	return identityOf(p), nil
}

// identityOf is who p is, whatever the scope's isolation: "key:" and the
// API key's name, "jwt:" and the token's subject ("" without one).
func identityOf(p auth.Principal) string {
	switch {
	case p.Method == auth.MethodAPIKey:
		return auth.KeyActor(p.KeyName)
	case p.Subject != "":
		return "jwt:" + p.Subject
	}
	return ""
}

// principalFrom is the principal authenticateScope found, "" for the
// tenant's key space.
func principalFrom(c *gin.Context) string { return logOf(c).principal }

// actorOf names the caller in the audit trail: "key:<name>" for an API key
// (its configured name, never the key), "jwt:" and the HMAC of the token's
// subject under the guard's secret for a JWT (Guard.HashActor: the subject
// may be personal data, the trail keeps only a pseudonym; "jwt" alone
// without a subject).
func (h *handlers) actorOf(p auth.Principal) string {
	switch p.Method {
	case auth.MethodAPIKey:
		return h.keyActors.of(p.Tenant, p.KeyName).Actor()
	case auth.MethodJWT:
		if p.Subject == "" {
			return "jwt"
		}
		return "jwt:" + h.guard.HashActor(p.Subject)
	}
	return ""
}

// callerOf is p's tenant and audit actor (actorOf) as the values of one
// context node: made once per API key (keyActors), per request for a JWT.
func (h *handlers) callerOf(p auth.Principal) *ctxkeys.Caller {
	if p.Method == auth.MethodAPIKey {
		return h.keyActors.of(p.Tenant, p.KeyName)
	}
	return ctxkeys.NewCaller(p.Tenant, h.actorOf(p))
}

// keyActors are the callers (ctxkeys.Caller: the tenant, and
// auth.KeyActor of the key's name) of the API keys seen, made once: every
// request names its caller, and the names are the configured keys' (at
// most maxKeyActors are kept; past that each is made again).
type keyActors struct {
	m    sync.Map // keyCaller → its *ctxkeys.Caller
	kept atomic.Int64
}

// keyCaller is an API key: its tenant and name.
type keyCaller struct {
	tenant tenancy.ID
	name   string
}

// maxKeyActors bounds keyActors.
const maxKeyActors = 4096

func (k *keyActors) of(tenant tenancy.ID, name string) *ctxkeys.Caller {
	if k == nil {
		return ctxkeys.NewCaller(tenant, auth.KeyActor(name))
	}
	kc := keyCaller{tenant: tenant, name: name}
	if a, ok := k.m.Load(kc); ok {
		return a.(*ctxkeys.Caller)
	}
	a := ctxkeys.NewCaller(tenant, auth.KeyActor(name))
	if k.kept.Load() < maxKeyActors {
		if _, loaded := k.m.LoadOrStore(kc, a); !loaded {
			k.kept.Add(1)
		}
	}
	return a
}

// isLoopbackOrigin reports whether origin is http://localhost,
// http://127.0.0.1 or http://[::1], with an optional port.
func isLoopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Scheme != "http" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return false
	}
	switch u.Hostname() {
	case "localhost", "127.0.0.1", "::1":
	default:
		return false
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		return err == nil && n > 0 && n <= 65535
	}
	return u.Host == u.Hostname() || u.Host == "[::1]"
}

// Routes of the demo page.
const (
	routePage   = "/"
	routeAssets = "/assets/*file"
)

// servePage mounts page at / and /assets/*.
func servePage(r *gin.Engine, page http.Handler) {
	h := gin.WrapH(page)
	for _, route := range []string{routePage, routeAssets} {
		r.GET(route, h)
		r.HEAD(route, h)
	}
}
