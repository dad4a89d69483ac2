package tenancy_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/tenancy"
)

const (
	testIssuer   = "https://idp.test/"
	testAudience = "idemguard-test"
)

// signer is one key of the test identity provider.
type signer struct {
	kid    string
	method jwt.SigningMethod
	priv   crypto.Signer
}

func newRSA(t *testing.T, kid string) signer {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	return signer{kid, jwt.SigningMethodRS256, k}
}

func newEC(t *testing.T, kid string) signer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return signer{kid, jwt.SigningMethodES256, k}
}

func newEd(t *testing.T, kid string) signer {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	return signer{kid, jwt.SigningMethodEdDSA, k}
}

// sign returns a token with the standard valid claims, changed by mutate.
func (s signer) sign(t *testing.T, mutate func(jwt.MapClaims)) string {
	t.Helper()
	now := time.Now()
	claims := jwt.MapClaims{
		"iss": testIssuer, "aud": testAudience, "sub": "user-1", "tenant_id": "acme",
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
	}
	if mutate != nil {
		mutate(claims)
	}
	tok := jwt.NewWithClaims(s.method, claims)
	tok.Header["kid"] = s.kid
	out, err := tok.SignedString(s.priv)
	require.NoError(t, err)
	return out
}

// idp serves a JWK Set that a test can replace, and counts the fetches.
type idp struct {
	srv     *httptest.Server
	mu      sync.Mutex
	jwks    []byte
	fetches atomic.Int64
}

func newIDP(t *testing.T, keys ...signer) *idp {
	t.Helper()
	p := &idp{}
	p.publish(t, keys...)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		p.fetches.Add(1)
		p.mu.Lock()
		b := p.jwks
		p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *idp) publish(t *testing.T, keys ...signer) {
	t.Helper()
	var set jwkset.JWKSMarshal
	for _, k := range keys {
		jwk, err := jwkset.NewJWKFromKey(k.priv.Public(), jwkset.JWKOptions{
			Metadata: jwkset.JWKMetadataOptions{KID: k.kid, ALG: jwkset.ALG(k.method.Alg()), USE: jwkset.UseSig},
		})
		require.NoError(t, err)
		set.Keys = append(set.Keys, jwk.Marshal())
	}
	b, err := json.Marshal(set)
	require.NoError(t, err)
	p.mu.Lock()
	p.jwks = b
	p.mu.Unlock()
}

func newVerifier(t *testing.T, p *idp, mutate func(*tenancy.JWTConfig)) *tenancy.JWTVerifier {
	t.Helper()
	cfg := tenancy.JWTConfig{JWKSURL: p.srv.URL + "/jwks.json", Issuer: testIssuer, Audience: testAudience}
	if mutate != nil {
		mutate(&cfg)
	}
	v, err := tenancy.NewJWTVerifier(cfg)
	require.NoError(t, err)
	t.Cleanup(v.Close)
	return v
}

func TestJWTVerifierAcceptsValidTokens(t *testing.T) {
	t.Parallel()
	rsaKey, ecKey, edKey := newRSA(t, "rsa-1"), newEC(t, "ec-1"), newEd(t, "ed-1")
	p := newIDP(t, rsaKey, ecKey, edKey)
	v := newVerifier(t, p, nil)
	ctx := context.Background()

	for _, tc := range []struct {
		key    signer
		tenant string
	}{{rsaKey, "acme"}, {ecKey, "beta.eu-1"}, {edKey, "Gamma_3"}} {
		id, err := v.Verify(ctx, tc.key.sign(t, func(c jwt.MapClaims) { c["tenant_id"] = tc.tenant }))
		require.NoError(t, err, tc.key.kid)
		require.Equal(t, tenancy.ID(tc.tenant), id, tc.key.kid)
	}
	// aud as a list holding ours; exp expired 10s ago, inside the 30s leeway.
	id, err := v.Verify(ctx, rsaKey.sign(t, func(c jwt.MapClaims) {
		c["aud"] = []string{"other", testAudience}
		c["exp"] = time.Now().Add(-10 * time.Second).Unix()
	}))
	require.NoError(t, err)
	require.Equal(t, tenancy.ID("acme"), id)

	// A configured claim name other than the default.
	v2 := newVerifier(t, p, func(c *tenancy.JWTConfig) { c.TenantClaim = "https://example.com/tenant" })
	id, err = v2.Verify(ctx, ecKey.sign(t, func(c jwt.MapClaims) { c["https://example.com/tenant"] = "delta" }))
	require.NoError(t, err)
	require.Equal(t, tenancy.ID("delta"), id)
	require.EqualValues(t, 2, p.fetches.Load(), "one fetch per verifier: the keys are cached")
}

func TestJWTVerifierRejects(t *testing.T) {
	t.Parallel()
	rsaKey, ecKey := newRSA(t, "rsa-1"), newEC(t, "ec-1")
	p := newIDP(t, rsaKey, ecKey)
	v := newVerifier(t, p, func(c *tenancy.JWTConfig) { c.UnknownKIDInterval = time.Hour })
	ctx := context.Background()
	now := time.Now()

	pubDER, err := x509.MarshalPKIXPublicKey(rsaKey.priv.Public())
	require.NoError(t, err)
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	hmacWithPublicKey := func(secret []byte) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"iss": testIssuer, "aud": testAudience, "tenant_id": "acme", "exp": now.Add(time.Minute).Unix(),
		})
		tok.Header["kid"] = rsaKey.kid
		s, err := tok.SignedString(secret)
		require.NoError(t, err)
		return s
	}
	none := func() string {
		tok := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{
			"iss": testIssuer, "aud": testAudience, "tenant_id": "acme", "exp": now.Add(time.Minute).Unix(),
		})
		tok.Header["kid"] = rsaKey.kid
		s, err := tok.SignedString(jwt.UnsafeAllowNoneSignatureType)
		require.NoError(t, err)
		return s
	}
	stranger := newRSA(t, "rsa-1") // same kid as a published key, another key
	unknown := newEC(t, "nobody")
	// RS256 signature relabelled as PS256 (an algorithm the verifier does not allow here).
	for name, tc := range map[string]struct {
		token  string
		reason string
	}{
		"expired":             {rsaKey.sign(t, func(c jwt.MapClaims) { c["exp"] = now.Add(-2 * time.Minute).Unix() }), "expired"},
		"no exp":              {rsaKey.sign(t, func(c jwt.MapClaims) { delete(c, "exp") }), "required claim"},
		"not yet valid":       {rsaKey.sign(t, func(c jwt.MapClaims) { c["nbf"] = now.Add(5 * time.Minute).Unix() }), "not valid yet"},
		"issued later":        {rsaKey.sign(t, func(c jwt.MapClaims) { c["iat"] = now.Add(5 * time.Minute).Unix() }), "issued in the future"},
		"wrong issuer":        {rsaKey.sign(t, func(c jwt.MapClaims) { c["iss"] = "https://evil.test/" }), "wrong issuer"},
		"no issuer":           {rsaKey.sign(t, func(c jwt.MapClaims) { delete(c, "iss") }), "required claim"},
		"no audience":         {rsaKey.sign(t, func(c jwt.MapClaims) { delete(c, "aud") }), "required claim"},
		"wrong audience":      {ecKey.sign(t, func(c jwt.MapClaims) { c["aud"] = "another-api" }), "wrong audience"},
		"alg none":            {none(), "signature invalid or algorithm not allowed"},
		"HS256, public key":   {hmacWithPublicKey(pubPEM), "signature invalid or algorithm not allowed"},
		"HS256, key DER":      {hmacWithPublicKey(pubDER), "signature invalid or algorithm not allowed"},
		"other key, same kid": {stranger.sign(t, nil), "signature invalid"},
		"unknown kid":         {unknown.sign(t, nil), "unknown key id"},
		"no tenant claim":     {rsaKey.sign(t, func(c jwt.MapClaims) { delete(c, "tenant_id") }), `no "tenant_id" claim`},
		"tenant not string":   {rsaKey.sign(t, func(c jwt.MapClaims) { c["tenant_id"] = 42 }), "not a string"},
		"tenant invalid":      {rsaKey.sign(t, func(c jwt.MapClaims) { c["tenant_id"] = "acme/../beta" }), "invalid tenant id"},
		"tenant too long":     {rsaKey.sign(t, func(c jwt.MapClaims) { c["tenant_id"] = strings.Repeat("a", 65) }), "invalid tenant id"},
		"tenant empty":        {rsaKey.sign(t, func(c jwt.MapClaims) { c["tenant_id"] = "" }), "invalid tenant id"},
		"garbage":             {"a.b.c", "malformed"},
		"too long":            {strings.Repeat("a", tenancy.MaxJWTBytes+1), "longer than"},
	} {
		id, err := v.Verify(ctx, tc.token)
		require.ErrorIs(t, err, tenancy.ErrInvalidCredentials, name)
		require.ErrorContains(t, err, tc.reason, name)
		require.Empty(t, id, name)
		require.NotContains(t, err.Error(), tc.token, "%s: the error quotes the token", name)
	}
}

func TestJWTVerifierAlgorithmAllowlist(t *testing.T) {
	t.Parallel()
	rsaKey, ecKey := newRSA(t, "rsa-1"), newEC(t, "ec-1")
	p := newIDP(t, rsaKey, ecKey)
	v := newVerifier(t, p, func(c *tenancy.JWTConfig) { c.Algorithms = []string{"ES256"} })
	_, err := v.Verify(context.Background(), rsaKey.sign(t, nil))
	require.ErrorIs(t, err, tenancy.ErrInvalidCredentials)
	_, err = v.Verify(context.Background(), ecKey.sign(t, nil))
	require.NoError(t, err)
}

func TestJWTVerifierKeyRotation(t *testing.T) {
	t.Parallel()
	oldKey, newKey := newRSA(t, "2026-01"), newEC(t, "2026-02")
	p := newIDP(t, oldKey)
	v := newVerifier(t, p, func(c *tenancy.JWTConfig) { c.UnknownKIDInterval = time.Hour })
	ctx := context.Background()

	_, err := v.Verify(ctx, oldKey.sign(t, nil))
	require.NoError(t, err)
	require.EqualValues(t, 1, p.fetches.Load())

	// The provider rotates: the new key is published, the old one withdrawn.
	p.publish(t, newKey)
	id, err := v.Verify(ctx, newKey.sign(t, func(c jwt.MapClaims) { c["tenant_id"] = "beta" }))
	require.NoError(t, err, "a token signed by the new key is accepted without a restart")
	require.Equal(t, tenancy.ID("beta"), id)
	require.EqualValues(t, 2, p.fetches.Load(), "the unknown kid caused one fetch")

	_, err = v.Verify(ctx, oldKey.sign(t, nil))
	require.ErrorIs(t, err, tenancy.ErrInvalidCredentials, "the withdrawn key is no longer trusted")

	// Unknown kids within the rate limit are rejected without a fetch.
	for range 5 {
		_, err = v.Verify(ctx, newEC(t, "unknown").sign(t, nil))
		require.ErrorContains(t, err, "unverifiable")
	}
	require.EqualValues(t, 2, p.fetches.Load(), "unknown kids are rate-limited")
}

func TestJWTVerifierPeriodicRefresh(t *testing.T) {
	t.Parallel()
	oldKey := newRSA(t, "a")
	p := newIDP(t, oldKey)
	v := newVerifier(t, p, func(c *tenancy.JWTConfig) { c.RefreshInterval = 20 * time.Millisecond })
	_ = v
	// The background refresh fetches again without any token asking for it.
	require.Eventually(t, func() bool { return p.fetches.Load() >= 3 }, 10*time.Second, 10*time.Millisecond)
}

func TestJWTConfigValidate(t *testing.T) {
	t.Parallel()
	good := tenancy.JWTConfig{JWKSURL: "https://idp.test/jwks", Issuer: testIssuer, Audience: testAudience}
	require.NoError(t, good.Validate())
	for name, tc := range map[string]struct {
		mutate func(*tenancy.JWTConfig)
		want   string
	}{
		"no url":      {func(c *tenancy.JWTConfig) { c.JWKSURL = "" }, "JWKSURL: is required"},
		"ftp url":     {func(c *tenancy.JWTConfig) { c.JWKSURL = "ftp://idp.test/jwks" }, "JWKSURL: must be an https:// URL"},
		"user info":   {func(c *tenancy.JWTConfig) { c.JWKSURL = "https://u:p@idp.test/jwks" }, "user info"},
		"no issuer":   {func(c *tenancy.JWTConfig) { c.Issuer = " " }, "Issuer is required"},
		"no audience": {func(c *tenancy.JWTConfig) { c.Audience = "" }, "Audience is required"},
		"leeway":      {func(c *tenancy.JWTConfig) { c.Leeway = time.Hour }, "Leeway must be at most"},
		"alg none":    {func(c *tenancy.JWTConfig) { c.Algorithms = []string{"RS256", "none"} }, `"none" is not allowed`},
		"alg HS256":   {func(c *tenancy.JWTConfig) { c.Algorithms = []string{"HS256"} }, `"HS256" is not allowed`},
	} {
		c := good
		tc.mutate(&c)
		require.ErrorContains(t, c.Validate(), tc.want, name)
		v, err := tenancy.NewJWTVerifier(c)
		require.Error(t, err, name)
		require.Nil(t, v, name)
	}
}

func TestCredentialsByMethod(t *testing.T) {
	t.Parallel()
	rsaKey := newRSA(t, "rsa-1")
	p := newIDP(t, rsaKey)
	keys, err := tenancy.NewAuthenticator(map[tenancy.ID][]string{"svc": {tenancy.HashAPIKey("svc-key")}})
	require.NoError(t, err)
	creds := &tenancy.Credentials{APIKeys: keys, JWT: newVerifier(t, p, nil)}
	token := rsaKey.sign(t, nil)
	req := func(bearer string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", "Bearer "+bearer)
		return r
	}
	ctx := context.Background()
	both := []tenancy.Method{tenancy.MethodAPIKey, tenancy.MethodJWT}

	for name, tc := range map[string]struct {
		bearer string
		accept []tenancy.Method
		tenant tenancy.ID
		method tenancy.Method
	}{
		"key, default":  {"svc-key", nil, "svc", tenancy.MethodAPIKey},
		"key, both":     {"svc-key", both, "svc", tenancy.MethodAPIKey},
		"jwt, both":     {token, both, "acme", tenancy.MethodJWT},
		"jwt, jwt only": {token, []tenancy.Method{tenancy.MethodJWT}, "acme", tenancy.MethodJWT},
	} {
		id, m, err := creds.AuthenticateRequest(ctx, req(tc.bearer), tc.accept)
		require.NoError(t, err, name)
		require.Equal(t, tc.tenant, id, name)
		require.Equal(t, tc.method, m, name)
	}
	for name, tc := range map[string]struct {
		bearer string
		accept []tenancy.Method
	}{
		"jwt, default (api keys only)": {token, nil},
		"key, jwt only":                {"svc-key", []tenancy.Method{tenancy.MethodJWT}},
		"unknown key, both":            {"nope", both},
	} {
		_, _, err := creds.AuthenticateRequest(ctx, req(tc.bearer), tc.accept)
		require.ErrorIs(t, err, tenancy.ErrInvalidCredentials, name)
	}
	_, _, err = creds.AuthenticateRequest(ctx, httptest.NewRequest(http.MethodGet, "/", nil), both)
	require.ErrorIs(t, err, tenancy.ErrNoCredentials)

	// JWT accepted but not configured: rejected, never passed through.
	_, _, err = (&tenancy.Credentials{APIKeys: keys}).AuthenticateRequest(ctx, req(token), both)
	require.ErrorIs(t, err, tenancy.ErrInvalidCredentials)
}

func TestParseMethod(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"api_key", "jwt"} {
		m, err := tenancy.ParseMethod(s)
		require.NoError(t, err)
		require.Equal(t, tenancy.Method(s), m)
	}
	_, err := tenancy.ParseMethod("cookie")
	require.ErrorContains(t, err, `"cookie" is not a credential method`)
}
