package auth_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/routers/auth/authtest"
	"github.com/idemguard/idemguard/tenancy"
)

const (
	testIssuer   = authtest.Issuer
	testAudience = authtest.Audience
)

type signer = authtest.Key

var (
	newRSA = authtest.RSA
	newEC  = authtest.EC
	newEd  = authtest.Ed
)

func newVerifier(t *testing.T, p *authtest.IDP, mutate func(*auth.JWTConfig)) *auth.JWTVerifier {
	t.Helper()
	cfg := auth.JWTConfig{JWKSURL: p.URL, Issuer: testIssuer, Audience: testAudience}
	if mutate != nil {
		mutate(&cfg)
	}
	v, err := auth.NewJWTVerifier(cfg)
	require.NoError(t, err)
	t.Cleanup(v.Close)
	return v
}

func TestJWTVerifierAcceptsValidTokens(t *testing.T) {
	t.Parallel()
	rsaKey, ecKey, edKey := newRSA(t, "rsa-1"), newEC(t, "ec-1"), newEd(t, "ed-1")
	p := authtest.NewIDP(t, rsaKey, ecKey, edKey)
	v := newVerifier(t, p, nil)
	ctx := context.Background()

	for _, tc := range []struct {
		key    signer
		tenant string
	}{{rsaKey, "acme"}, {ecKey, "beta.eu-1"}, {edKey, "Gamma_3"}} {
		id, err := v.Verify(ctx, tc.key.Sign(t, "acme", func(c jwt.MapClaims) { c["tenant_id"] = tc.tenant }))
		require.NoError(t, err, tc.key.KID)
		require.Equal(t, tenancy.ID(tc.tenant), id, tc.key.KID)
	}
	// aud as a list holding ours; exp expired 10s ago, inside the 30s leeway.
	id, err := v.Verify(ctx, rsaKey.Sign(t, "acme", func(c jwt.MapClaims) {
		c["aud"] = []string{"other", testAudience}
		c["exp"] = time.Now().Add(-10 * time.Second).Unix()
	}))
	require.NoError(t, err)
	require.Equal(t, tenancy.ID("acme"), id)

	// A configured claim name other than the default.
	v2 := newVerifier(t, p, func(c *auth.JWTConfig) { c.TenantClaim = "https://example.com/tenant" })
	id, err = v2.Verify(ctx, ecKey.Sign(t, "acme", func(c jwt.MapClaims) { c["https://example.com/tenant"] = "delta" }))
	require.NoError(t, err)
	require.Equal(t, tenancy.ID("delta"), id)
	require.EqualValues(t, 2, p.Fetches(), "one fetch per verifier: the keys are cached")
}

// forgedToken is a token of tenant acme, valid for a minute after now,
// that names the published key kid but is signed by method with secret: a
// verifier that trusts the token's alg header accepts it.
func forgedToken(t *testing.T, method jwt.SigningMethod, secret any, kid string, now time.Time) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, jwt.MapClaims{
		"iss": testIssuer, "aud": testAudience, "tenant_id": "acme", "exp": now.Add(time.Minute).Unix(),
	})
	tok.Header["kid"] = kid
	s, err := tok.SignedString(secret)
	require.NoError(t, err)
	return s
}

func TestJWTVerifierRejects(t *testing.T) {
	t.Parallel()
	rsaKey, ecKey := newRSA(t, "rsa-1"), newEC(t, "ec-1")
	p := authtest.NewIDP(t, rsaKey, ecKey)
	v := newVerifier(t, p, func(c *auth.JWTConfig) { c.UnknownKIDInterval = time.Hour })
	ctx := context.Background()
	now := time.Now()

	pubDER, err := x509.MarshalPKIXPublicKey(rsaKey.Priv.Public())
	require.NoError(t, err)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	forge := func(method jwt.SigningMethod, secret any) string {
		return forgedToken(t, method, secret, rsaKey.KID, now)
	}
	stranger := newRSA(t, "rsa-1") // same kid as a published key, another key
	unknown := newEC(t, "nobody")
	for name, tc := range map[string]struct {
		token  string
		words  string
		reason auth.Reason
	}{
		"expired":             {rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { c["exp"] = now.Add(-2 * time.Minute).Unix() }), "expired", auth.ReasonExpired},
		"no exp":              {rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { delete(c, "exp") }), "required claim", auth.ReasonMissingClaim},
		"not yet valid":       {rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { c["nbf"] = now.Add(5 * time.Minute).Unix() }), "not valid yet", auth.ReasonNotYetValid},
		"issued later":        {rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { c["iat"] = now.Add(5 * time.Minute).Unix() }), "issued in the future", auth.ReasonNotYetValid},
		"wrong issuer":        {rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { c["iss"] = "https://evil.test/" }), "wrong issuer", auth.ReasonWrongIssuer},
		"no issuer":           {rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { delete(c, "iss") }), "required claim", auth.ReasonMissingClaim},
		"no audience":         {rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { delete(c, "aud") }), "required claim", auth.ReasonMissingClaim},
		"wrong audience":      {ecKey.Sign(t, "acme", func(c jwt.MapClaims) { c["aud"] = "another-api" }), "wrong audience", auth.ReasonWrongAudience},
		"alg none":            {forge(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType), "signature invalid or algorithm not allowed", auth.ReasonBadSignature},
		"HS256, public key":   {forge(jwt.SigningMethodHS256, pubPEM), "signature invalid or algorithm not allowed", auth.ReasonBadSignature},
		"HS256, key DER":      {forge(jwt.SigningMethodHS256, pubDER), "signature invalid or algorithm not allowed", auth.ReasonBadSignature},
		"other key, same kid": {stranger.Sign(t, "acme", nil), "signature invalid", auth.ReasonBadSignature},
		"unknown kid":         {unknown.Sign(t, "acme", nil), "unknown key id", auth.ReasonUnknownKeyID},
		"no tenant claim":     {rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { delete(c, "tenant_id") }), `no "tenant_id" claim`, auth.ReasonInvalidTenant},
		"tenant not string":   {rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { c["tenant_id"] = 42 }), "not a string", auth.ReasonInvalidTenant},
		"tenant invalid":      {rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { c["tenant_id"] = "acme/../beta" }), "invalid tenant id", auth.ReasonInvalidTenant},
		"tenant too long":     {rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { c["tenant_id"] = strings.Repeat("a", 65) }), "invalid tenant id", auth.ReasonInvalidTenant},
		"tenant empty":        {rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { c["tenant_id"] = "" }), "invalid tenant id", auth.ReasonInvalidTenant},
		"garbage":             {"a.b.c", "malformed", auth.ReasonMalformed},
		"too long":            {strings.Repeat("a", auth.MaxJWTBytes+1), "longer than", auth.ReasonMalformed},
	} {
		id, err := v.Verify(ctx, tc.token)
		require.ErrorIs(t, err, auth.ErrInvalidCredentials, name)
		require.ErrorContains(t, err, tc.words, name)
		require.Equal(t, tc.reason, auth.ReasonOf(err), name)
		require.Empty(t, id, name)
		require.NotContains(t, err.Error(), tc.token, "%s: the error quotes the token", name)
	}
}

func TestJWTVerifierAlgorithmAllowlist(t *testing.T) {
	t.Parallel()
	rsaKey, ecKey := newRSA(t, "rsa-1"), newEC(t, "ec-1")
	p := authtest.NewIDP(t, rsaKey, ecKey)
	v := newVerifier(t, p, func(c *auth.JWTConfig) { c.Algorithms = []string{"ES256"} })
	_, err := v.Verify(context.Background(), rsaKey.Sign(t, "acme", nil))
	require.ErrorIs(t, err, auth.ErrInvalidCredentials)
	_, err = v.Verify(context.Background(), ecKey.Sign(t, "acme", nil))
	require.NoError(t, err)
}

func TestJWTVerifierKeyRotation(t *testing.T) {
	t.Parallel()
	oldKey, newKey := newRSA(t, "2026-01"), newEC(t, "2026-02")
	p := authtest.NewIDP(t, oldKey)
	v := newVerifier(t, p, func(c *auth.JWTConfig) { c.UnknownKIDInterval = time.Hour })
	ctx := context.Background()

	_, err := v.Verify(ctx, oldKey.Sign(t, "acme", nil))
	require.NoError(t, err)
	require.EqualValues(t, 1, p.Fetches())

	// The provider rotates: the new key is published, the old one withdrawn.
	p.Publish(t, newKey)
	id, err := v.Verify(ctx, newKey.Sign(t, "acme", func(c jwt.MapClaims) { c["tenant_id"] = "beta" }))
	require.NoError(t, err, "a token signed by the new key is accepted without a restart")
	require.Equal(t, tenancy.ID("beta"), id)
	require.EqualValues(t, 2, p.Fetches(), "the unknown kid caused one fetch")

	_, err = v.Verify(ctx, oldKey.Sign(t, "acme", nil))
	require.ErrorIs(t, err, auth.ErrInvalidCredentials, "the withdrawn key is no longer trusted")

	// Unknown kids within the rate limit are rejected without a fetch.
	for range 5 {
		_, err = v.Verify(ctx, newEC(t, "unknown").Sign(t, "acme", nil))
		require.ErrorContains(t, err, "unverifiable")
	}
	require.EqualValues(t, 2, p.Fetches(), "unknown kids are rate-limited")
}

func TestJWTVerifierPeriodicRefresh(t *testing.T) {
	t.Parallel()
	oldKey := newRSA(t, "a")
	p := authtest.NewIDP(t, oldKey)
	v := newVerifier(t, p, func(c *auth.JWTConfig) { c.RefreshInterval = 20 * time.Millisecond })
	_ = v
	// The background refresh fetches again without any token asking for it.
	require.Eventually(t, func() bool { return p.Fetches() >= 3 }, 10*time.Second, 10*time.Millisecond)
}

func TestJWTConfigValidate(t *testing.T) {
	t.Parallel()
	good := auth.JWTConfig{JWKSURL: "https://idp.test/jwks", Issuer: testIssuer, Audience: testAudience}
	require.NoError(t, good.Validate())
	for name, tc := range map[string]struct {
		mutate func(*auth.JWTConfig)
		want   string
	}{
		"no url":      {func(c *auth.JWTConfig) { c.JWKSURL = "" }, "JWKSURL: is required"},
		"ftp url":     {func(c *auth.JWTConfig) { c.JWKSURL = "ftp://idp.test/jwks" }, "JWKSURL: must be an https:// URL"},
		"user info":   {func(c *auth.JWTConfig) { c.JWKSURL = "https://u:p@idp.test/jwks" }, "user info"},
		"no issuer":   {func(c *auth.JWTConfig) { c.Issuer = " " }, "Issuer is required"},
		"no audience": {func(c *auth.JWTConfig) { c.Audience = "" }, "Audience is required"},
		"leeway":      {func(c *auth.JWTConfig) { c.Leeway = time.Hour }, "Leeway must be at most"},
		"alg none":    {func(c *auth.JWTConfig) { c.Algorithms = []string{"RS256", "none"} }, `"none" is not allowed`},
		"alg HS256":   {func(c *auth.JWTConfig) { c.Algorithms = []string{"HS256"} }, `"HS256" is not allowed`},
	} {
		c := good
		tc.mutate(&c)
		require.ErrorContains(t, c.Validate(), tc.want, name)
		v, err := auth.NewJWTVerifier(c)
		require.Error(t, err, name)
		require.Nil(t, v, name)
	}
}

func TestCredentialsByMethod(t *testing.T) {
	t.Parallel()
	rsaKey := newRSA(t, "rsa-1")
	p := authtest.NewIDP(t, rsaKey)
	keys, err := auth.NewAuthenticator(map[tenancy.ID][]string{"svc": {auth.HashAPIKey("svc-key")}})
	require.NoError(t, err)
	creds := &auth.Credentials{APIKeys: keys, JWT: newVerifier(t, p, nil)}
	token := rsaKey.Sign(t, "acme", nil)
	req := func(bearer string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", "Bearer "+bearer)
		return r
	}
	ctx := context.Background()
	both := []auth.Method{auth.MethodAPIKey, auth.MethodJWT}

	for name, tc := range map[string]struct {
		bearer string
		accept []auth.Method
		tenant tenancy.ID
		method auth.Method
	}{
		"key, default":  {"svc-key", nil, "svc", auth.MethodAPIKey},
		"key, both":     {"svc-key", both, "svc", auth.MethodAPIKey},
		"jwt, both":     {token, both, "acme", auth.MethodJWT},
		"jwt, jwt only": {token, []auth.Method{auth.MethodJWT}, "acme", auth.MethodJWT},
	} {
		id, m, err := creds.AuthenticateRequest(ctx, req(tc.bearer), tc.accept)
		require.NoError(t, err, name)
		require.Equal(t, tc.tenant, id, name)
		require.Equal(t, tc.method, m, name)
	}
	for name, tc := range map[string]struct {
		bearer string
		accept []auth.Method
	}{
		"jwt, default (api keys only)": {token, nil},
		"key, jwt only":                {"svc-key", []auth.Method{auth.MethodJWT}},
		"unknown key, both":            {"nope", both},
	} {
		_, _, err := creds.AuthenticateRequest(ctx, req(tc.bearer), tc.accept)
		require.ErrorIs(t, err, auth.ErrInvalidCredentials, name)
	}
	_, _, err = creds.AuthenticateRequest(ctx, httptest.NewRequest(http.MethodGet, "/", nil), both)
	require.ErrorIs(t, err, auth.ErrNoCredentials)

	// JWT accepted but not configured: rejected, never passed through.
	_, _, err = (&auth.Credentials{APIKeys: keys}).AuthenticateRequest(ctx, req(token), both)
	require.ErrorIs(t, err, auth.ErrInvalidCredentials)
}

func TestParseMethod(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"api_key", "jwt"} {
		m, err := auth.ParseMethod(s)
		require.NoError(t, err)
		require.Equal(t, auth.Method(s), m)
	}
	_, err := auth.ParseMethod("cookie")
	require.ErrorContains(t, err, `"cookie" is not a credential method`)
}

// A verifier with JWTConfig.Tenants refuses a genuine token whose claim
// names any other tenant (an API-key tenant, another customer): on the code
// before the allowlist, the token below for "payroll" was accepted.
func TestJWTVerifierTenantAllowlist(t *testing.T) {
	t.Parallel()
	rsaKey := newRSA(t, "rsa-1")
	p := authtest.NewIDP(t, rsaKey)
	v := newVerifier(t, p, func(c *auth.JWTConfig) { c.Tenants = []tenancy.ID{"acme", "beta"} })
	ctx := context.Background()
	id, err := v.Verify(ctx, rsaKey.Sign(t, "beta", nil))
	require.NoError(t, err)
	require.Equal(t, tenancy.ID("beta"), id)
	_, err = v.Verify(ctx, rsaKey.Sign(t, "payroll", nil))
	require.ErrorIs(t, err, auth.ErrInvalidCredentials)
	require.Equal(t, auth.ReasonInvalidTenant, auth.ReasonOf(err))
	require.NotContains(t, err.Error(), "payroll", "the log does not learn which tenant was tried")

	cfg := auth.JWTConfig{JWKSURL: p.URL, Issuer: testIssuer, Audience: testAudience, Tenants: []tenancy.ID{"a b"}}
	require.ErrorContains(t, cfg.Validate(), "JWTConfig.Tenants[0]")
}
