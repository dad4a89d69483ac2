package routers

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/routers/auth/authtest"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

// jwtSetup is a test API whose "echo" scope accepts API keys and JWTs, and
// whose "actionRequests.aiProposeCopy" scope API keys only (the default).
func jwtSetup(t *testing.T, keys ...authtest.Key) *testBundle {
	t.Helper()
	idp := authtest.NewIDP(t, keys...)
	v, err := auth.NewJWTVerifier(auth.JWTConfig{
		JWKSURL: idp.URL, Issuer: authtest.Issuer, Audience: authtest.Audience, UnknownKIDInterval: time.Hour,
	})
	require.NoError(t, err)
	t.Cleanup(v.Close)
	return setup(t, setupOpts{options: func(o *Options) {
		o.JWT = v
		o.ScopeAuth = map[string][]auth.Method{"echo": {auth.MethodAPIKey, auth.MethodJWT}}
		// These tests send many rejected tokens from one test client on
		// purpose; the failed-authentication limit has its own test.
		o.AuthFailures.Max = -1
	}})
}

func TestJWTAuth(t *testing.T) {
	t.Parallel()
	rsaKey, ecKey := authtest.RSA(t, "rsa-1"), authtest.EC(t, "ec-1")
	b := jwtSetup(t, rsaKey, ecKey)

	for _, token := range []string{rsaKey.Sign(t, "acme", nil), ecKey.Sign(t, "acme", nil)} {
		w := b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: `{"n":1}`, apiKey: token})
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	}
	require.EqualValues(t, 1, b.calls["echo"].Load(), "the second token of the same tenant got the replay")

	bad := badJWTs(t, rsaKey)
	for name, token := range bad {
		for _, r := range []req{
			{method: http.MethodPost, path: "/v1/ops/echo", body: `{"n":2}`, apiKey: token},
			{method: http.MethodGet, path: "/v1/ops/echo/keys/any", apiKey: token},
		} {
			w := b.do(r)
			require.Equal(t, http.StatusUnauthorized, w.Code, name)
			require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"), name)
			require.Equal(t, false, problemOf(t, w)["ok"], name)
			require.Contains(t, w.Header().Get("WWW-Authenticate"), `error="invalid_token"`, name)
		}
	}
	require.EqualValues(t, 1, b.calls["echo"].Load())
	require.Len(t, b.store.Rows(), 1)

	// Each failure is logged with its reason, never with the token.
	failures := b.logs.Lines(t, "http: authentication failed")
	require.Len(t, failures, 2*len(bad))
	reasons := ""
	for _, l := range failures {
		reasons += l["reason"].(string) + "\n"
	}
	for _, want := range []string{"expired", "wrong issuer", "wrong audience", "unknown key id", `no "tenant_id" claim`, "invalid tenant id", "unknown API key"} {
		require.Contains(t, reasons, want)
	}
	for name, token := range bad {
		require.NotContains(t, b.logs.String(), token, name)
	}

	// A scope that accepts API keys only rejects a valid token.
	w := b.do(req{method: http.MethodPost, path: "/v1/ops/actionRequests.aiProposeCopy", body: `{}`,
		apiKey: rsaKey.Sign(t, "acme", nil), headers: []string{"Idempotency-Key", "k"}})
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.EqualValues(t, 0, b.calls["strict"].Load())
}

// badJWTs are bearer credentials jwtSetup's API refuses, by name: tokens
// of rsaKey's tenant acme that are expired, for another issuer or
// audience, unsigned, HMAC-signed or signed by an unpublished key, without
// a valid tenant, and a string that is no JWT.
func badJWTs(t *testing.T, rsaKey authtest.Key) map[string]string {
	now := time.Now()
	hs256 := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"iss": authtest.Issuer, "aud": authtest.Audience, "tenant_id": "acme", "exp": now.Add(time.Minute).Unix(),
		})
		tok.Header["kid"] = "rsa-1"
		s, err := tok.SignedString([]byte("public key bytes, or any secret"))
		require.NoError(t, err)
		return s
	}()
	none := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{
			"iss": authtest.Issuer, "aud": authtest.Audience, "tenant_id": "acme", "exp": now.Add(time.Minute).Unix(),
		})
		s, err := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
		require.NoError(t, err)
		return s
	}()
	return map[string]string{
		"expired":        rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() }),
		"wrong issuer":   rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { c["iss"] = "https://evil.test/" }),
		"wrong audience": rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { c["aud"] = "other" }),
		"alg none":       none,
		"HS256":          hs256,
		"unknown kid":    authtest.RSA(t, "rsa-2").Sign(t, "acme", nil),
		"no tenant":      rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { delete(c, "tenant_id") }),
		"bad tenant":     rsaKey.Sign(t, "acme beta", nil),
		"not a jwt":      "eyJhbGciOiJSUzI1NiJ9.e30",
	}
}

// TestJWTTenantIsolation: the tenant comes only from the verified claim, so
// a token of one tenant can neither read nor replay another tenant's key.
func TestJWTTenantIsolation(t *testing.T) {
	t.Parallel()
	key := authtest.EC(t, "ec-1")
	b := jwtSetup(t, key)
	const body = `{"n":7}`

	require.Equal(t, http.StatusOK, b.post("echo", "shared-key", body).Code) // acme, by API key
	beta := key.Sign(t, "beta", nil)
	w := b.do(req{method: http.MethodGet, path: "/v1/ops/echo/keys/shared-key", apiKey: beta})
	require.Equal(t, http.StatusNotFound, w.Code, "beta's token reads acme's key")
	w = b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: body, apiKey: beta, headers: []string{"Idempotency-Key", "shared-key"}})
	require.Equal(t, http.StatusOK, w.Code)
	require.Empty(t, w.Header().Get(pipeline.HeaderReplayed), "beta's token replays acme's answer")
	require.EqualValues(t, 2, b.calls["echo"].Load(), "beta's call ran on its own")
	tenants := map[string]bool{}
	for _, r := range b.store.Rows() {
		tenants[r.Tenant] = true
	}
	require.Equal(t, map[string]bool{"acme": true, "beta": true}, tenants)

	// A claim naming acme is a user of acme, whose keys are their own by
	// default (principal_test.go): the API key's key is not theirs.
	w = b.do(req{method: http.MethodGet, path: "/v1/ops/echo/keys/shared-key", apiKey: key.Sign(t, "acme", nil)})
	require.Equal(t, http.StatusNotFound, w.Code)
}

func TestScopeAuthValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.opts
	o.ScopeAuth = map[string][]auth.Method{"echo": {auth.MethodJWT}}
	_, err := New(o)
	require.ErrorContains(t, err, `Options.ScopeAuth["echo"] accepts jwt but Options.JWT is nil`)
	o.ScopeAuth = map[string][]auth.Method{"echo": {}}
	_, err = New(o)
	require.ErrorContains(t, err, `Options.ScopeAuth["echo"] is empty`)
	o.ScopeAuth = map[string][]auth.Method{"echo": {"cookie"}}
	_, err = New(o)
	require.ErrorContains(t, err, `"cookie" is not a credential method`)
}

func TestCORSLoopback(t *testing.T) {
	t.Parallel()
	dev := setup(t, setupOpts{options: func(o *Options) { o.CORSLoopback = true }})
	preflight := func(b *testBundle, origin string) *http.Response {
		return b.do(req{method: http.MethodOptions, path: "/v1/ops/echo", headers: []string{
			"Origin", origin, "Access-Control-Request-Method", "POST",
			"Access-Control-Request-Headers", "authorization, content-type, idempotency-key, prefer",
		}}).Result()
	}
	for _, origin := range []string{"http://localhost:3000", "http://127.0.0.1:5173", "http://localhost", "http://[::1]:8080"} {
		resp := preflight(dev, origin)
		require.Equal(t, http.StatusNoContent, resp.StatusCode, origin)
		require.Equal(t, origin, resp.Header.Get("Access-Control-Allow-Origin"), origin)
		allowed := strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers"))
		for _, h := range []string{"authorization", "content-type", "idempotency-key", "prefer"} {
			require.Contains(t, allowed, h, origin)
		}
	}
	w := dev.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: `{}`, apiKey: acmeKey1, headers: []string{"Origin", "http://localhost:3000"}})
	require.Equal(t, "http://localhost:3000", w.Header().Get("Access-Control-Allow-Origin"))
	exposed := strings.ToLower(w.Header().Get("Access-Control-Expose-Headers"))
	for _, h := range ExposedHeaders {
		require.Contains(t, exposed, strings.ToLower(h))
	}

	for _, origin := range []string{
		"https://localhost:3000", "http://localhost.evil.example", "http://evil.example", "http://127.0.0.2:80",
		"http://localhost:0", "http://localhost:99999", "http://user@localhost:3000", "http://localhost:3000/x", "null",
	} {
		resp := preflight(dev, origin)
		require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), origin)
	}
	// Without CORSLoopback (production), loopback origins get nothing.
	resp := preflight(setup(t), "http://localhost:3000")
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
}

func TestHeadProbes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		w := b.do(req{method: http.MethodHead, path: path})
		require.Equal(t, http.StatusOK, w.Code, path)
	}
}

func TestPage(t *testing.T) {
	t.Parallel()
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("page " + r.URL.Path)) })
	b := setup(t, setupOpts{options: func(o *Options) { o.Page = page }})
	for _, path := range []string{"/", "/assets/demo.js"} {
		w := b.do(req{method: http.MethodGet, path: path})
		require.Equal(t, http.StatusOK, w.Code, path)
		require.Equal(t, "page "+path, w.Body.String())
	}
	// Without a page, / is an unknown route.
	require.Equal(t, http.StatusNotFound, setup(t).do(req{method: http.MethodGet, path: "/"}).Code)
}
