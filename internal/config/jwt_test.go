package config

import (
	"testing"
	"time"

	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/tenancy"
	"github.com/stretchr/testify/require"
)

func TestLoadJWT(t *testing.T) {
	t.Parallel()
	// No API key at all: a JWT-only production deployment is valid.
	c, err := loadProductionJWT(t, `
  tenant_claim: https://example.com/tenant
  leeway: 10s
  algorithms: [ES256]
  tenants: [acme, beta, acme]
scopes:
  - {name: chat, operation: demo, auth: [api_key, jwt], isolation: principal}
  - {name: batch, operation: demo}
`)
	require.NoError(t, err)
	require.Equal(t, JWT{
		JWKSURL: "https://idp.example.com/.well-known/jwks.json", Issuer: "https://idp.example.com/", Audience: "idemguard",
		TenantClaim: "https://example.com/tenant", Leeway: 10 * time.Second, Algorithms: []string{"ES256"},
		Tenants: []tenancy.ID{"acme", "beta"},
	}, c.JWT)
	require.Equal(t, IsolationPrincipal, c.Scopes[0].Isolation)
	require.Empty(t, c.Scopes[1].Isolation, "default: auto")
	require.Equal(t, []auth.Method{auth.MethodAPIKey, auth.MethodJWT}, c.Scopes[0].Auth)
	require.Nil(t, c.Scopes[1].Auth, "default: API keys only")
	require.True(t, c.Scopes[0].AcceptsJWT())
	require.False(t, c.Scopes[1].AcceptsJWT())
	tc := c.JWTConfig()
	require.NoError(t, tc.Validate())
	require.Equal(t, 10*time.Second, tc.Leeway)

	// Environment overrides; defaults for the claim, leeway and algorithms.
	c, err = Load("", envOf(map[string]string{
		EnvMode: "development", EnvJWTJWKSURL: "http://127.0.0.1:9999/jwks", EnvJWTIssuer: "iss", EnvJWTAudience: "aud",
	}))
	require.NoError(t, err)
	require.Equal(t, JWT{JWKSURL: "http://127.0.0.1:9999/jwks", Issuer: "iss", Audience: "aud",
		TenantClaim: auth.DefaultTenantClaim, Leeway: auth.DefaultJWTLeeway, Algorithms: auth.DefaultJWTAlgorithms}, c.JWT)

	// Without jwt settings JWTs are off.
	c, err = Load("", envOf(nil))
	require.NoError(t, err)
	require.False(t, c.JWT.Enabled())
}

func TestLoadJWTNamesBadSettings(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		yaml, env string
		want      []string
	}{
		"jwt scope without jwks": {yaml: "scopes:\n  - {name: chat, operation: demo, auth: [jwt]}\n",
			want: []string{"jwt.jwks_url: is required: scopes[0] accept(s) jwt"}},
		"unknown method": {yaml: "scopes:\n  - {name: chat, operation: demo, auth: [api_key, cookie]}\n",
			want: []string{`scopes[0].auth[1]: "cookie" is not a credential method`}},
		"missing issuer and audience": {yaml: "jwt: {jwks_url: 'https://idp.test/jwks'}\n",
			want: []string{"jwt.issuer: is required", "jwt.audience: is required"}},
		"bad url": {yaml: "jwt: {jwks_url: 'idp.test/jwks', issuer: i, audience: a}\n",
			want: []string{"jwt.jwks_url: must be an https:// URL"}},
		"http in production": {yaml: "jwt: {jwks_url: 'http://idp.test/jwks', issuer: i, audience: a}\n", env: "production",
			want: []string{"jwt.jwks_url: must be https in production mode"}},
		"leeway": {yaml: "jwt: {jwks_url: 'https://idp.test/jwks', issuer: i, audience: a, leeway: 1h}\n",
			want: []string{"jwt.leeway: must be between 0s and 5m0s, got 1h0m0s"}},
		"bad leeway": {yaml: "jwt: {jwks_url: 'https://idp.test/jwks', issuer: i, audience: a, leeway: soon}\n",
			want: []string{`jwt.leeway: "soon" is not a duration`}},
		"hmac": {yaml: "jwt: {jwks_url: 'https://idp.test/jwks', issuer: i, audience: a, algorithms: [RS256, HS256]}\n",
			want: []string{`jwt.algorithms[1]: "HS256" is not allowed`}},
		"none": {yaml: "jwt: {jwks_url: 'https://idp.test/jwks', issuer: i, audience: a, algorithms: [none]}\n",
			want: []string{`jwt.algorithms[0]: "none" is not allowed`}},
		"unknown key": {yaml: "jwt: {jwks_uri: 'https://idp.test/jwks'}\n", want: []string{"jwks_uri"}},
	} {
		env := map[string]string{}
		if tc.env == "production" {
			env = map[string]string{EnvMode: "production", EnvMySQLDSN: "u@tcp(h:3306)/d", EnvSecret: secret}
		}
		_, err := Load(writeFile(t, tc.yaml), envOf(env))
		require.Error(t, err, name)
		for _, w := range tc.want {
			require.ErrorContains(t, err, w, name)
		}
	}
}

// A production JWT setup names the tenants its tokens may name; a scope's
// isolation is one of three words.
func TestLoadJWTTenantsAndIsolation(t *testing.T) {
	t.Parallel()
	_, err := loadProductionJWT(t, `
  tenants: [acme, "not a tenant"]
scopes:
  - {name: chat, operation: demo, auth: [jwt], isolation: users}
`)
	require.ErrorContains(t, err, "jwt.tenants[1]: ")
	require.ErrorContains(t, err, "scopes[0].isolation: must be auto")
	_, err = loadProductionJWT(t, `
scopes:
  - {name: chat, operation: demo, auth: [jwt]}
`)
	require.ErrorContains(t, err, "jwt.tenants: is required in production mode")
}

// loadProductionJWT loads a production config whose jwt section has the
// JWKS URL, issuer and audience; rest goes on after them (more jwt
// settings, indented, then the scopes).
func loadProductionJWT(t *testing.T, rest string) (*Config, error) {
	t.Helper()
	const head = `
mode: production
mysql_dsn: u:p@tcp(db:3306)/idemguard
jwt:
  jwks_url: https://idp.example.com/.well-known/jwks.json
  issuer: https://idp.example.com/
  audience: idemguard
`
	return Load(writeFile(t, head+rest[1:]), envOf(map[string]string{EnvSecret: secret}))
}
