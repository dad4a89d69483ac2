package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/routers/auth/authtest"
)

// TestJWTEndToEnd: the built binary, configured with a JWKS, accepts browser
// tokens on a scope that lists jwt, takes the tenant from the claim, picks up
// a key rotation without a restart and answers a bad token 401 (the reason
// logged, the token not).
func TestJWTEndToEnd(t *testing.T) {
	t.Parallel()
	oldKey, newKey := authtest.RSA(t, "2026-01"), authtest.EC(t, "2026-02")
	idp := authtest.NewIDP(t, oldKey)
	s := startService(t, map[string]string{"IDEMGUARD_MODE": "development", "IDEMGUARD_LISTEN": "127.0.0.1:0"}, `
jwt:
  jwks_url: `+idp.URL+`
  issuer: `+authtest.Issuer+`
  audience: `+authtest.Audience+`
scopes:
  - {name: demo, operation: demo, delay: 10ms, auth: [api_key, jwt]}
  - {name: services, operation: demo, delay: 10ms}
`)
	c := newClient(t)
	const body = `{"messages":[{"role":"user","content":"hello"}]}`

	first := post(t, c, s, "demo", oldKey.Sign(t, "acme", nil), "jwt-1", body)
	require.Equal(t, http.StatusOK, first.status, first.String())
	replay := post(t, c, s, "demo", oldKey.Sign(t, "acme", nil), "jwt-1", body)
	requireReplayOf(t, first, replay)

	// The demo tenant's API key, same client key: another tenant, its own run.
	other := post(t, c, s, "demo", "dev-demo-key", "jwt-1", body)
	require.Equal(t, http.StatusOK, other.status, other.String())
	require.Empty(t, other.header.Get("Idempotent-Replayed"))

	// Rotation: the provider publishes a new key and signs with it; no
	// restart (the unknown kid makes the service fetch the JWKS again).
	idp.Publish(t, oldKey, newKey)
	res, _ := lookup(t, c, s, "demo", newKey.Sign(t, "beta", nil), "jwt-1")
	require.Equal(t, http.StatusNotFound, res.status, "beta must not see acme's key: %s", res)
	res, rec := lookup(t, c, s, "demo", newKey.Sign(t, "acme", nil), "jwt-1")
	require.Equal(t, http.StatusOK, res.status, res.String())
	require.Equal(t, "succeeded", rec.Status)

	// A scope without jwt refuses tokens; bad tokens get 401 problems.
	expired := oldKey.Sign(t, "acme", func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() })
	for _, a := range []answer{
		post(t, c, s, "services", oldKey.Sign(t, "acme", nil), "jwt-2", body),
		post(t, c, s, "demo", expired, "jwt-2", body),
		post(t, c, s, "demo", oldKey.Sign(t, "acme", func(c jwt.MapClaims) { c["aud"] = "someone-else" }), "jwt-2", body),
		post(t, c, s, "demo", oldKey.Sign(t, "../acme", nil), "jwt-2", body),
	} {
		requireProblem(t, a, http.StatusUnauthorized, "")
		require.Contains(t, a.header.Get("WWW-Authenticate"), `error="invalid_token"`)
	}
	// The log is read from the process's stderr as it comes: wait for the four lines.
	var reasons []string
	eventually(t, 10*time.Second, "four authentication failures logged", func() bool {
		reasons = reasons[:0]
		for _, line := range strings.Split(s.logs.String(), "\n") {
			var l struct{ Msg, Reason string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "http: authentication failed" {
				reasons = append(reasons, l.Reason)
			}
		}
		return len(reasons) >= 4
	})
	joined := strings.Join(reasons, "\n")
	for _, want := range []string{"expired", "wrong audience", "invalid tenant id", "unknown API key"} {
		require.Contains(t, joined, want)
	}
	require.NotContains(t, s.logs.String(), expired)
}
