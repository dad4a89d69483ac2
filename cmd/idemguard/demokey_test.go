package main

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/routers/auth"
)

// TestServeDemoKeyOnlyOnDemoScopes: in development mode the public demo key
// opens the demo scopes and the demo tenant's own figures, and nothing
// else: another scope answers 401 like an unknown key (it says nothing
// about where the key would work).
func TestServeDemoKeyOnlyOnDemoScopes(t *testing.T) {
	t.Parallel()
	s := startServe(t, map[string]string{"IDEMGUARD_MODE": "development", "IDEMGUARD_LISTEN": "127.0.0.1:0",
		"IDEMGUARD_API_KEYS": "acme:" + auth.HashAPIKey("acme-key-0123456789")}, `
scopes:
  - {name: demo, operation: demo, delay: 10ms}
  - {name: real, operation: demo, delay: 10ms}
`)
	resp, body := s.post(t, "/v1/ops/demo", "dev-demo-key", "k1", `{"a":1}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	resp, body = s.post(t, "/v1/ops/real", "dev-demo-key", "k1", `{"a":1}`)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, string(body))
	require.Contains(t, string(body), "the API key is not recognised", "answered like an unknown key")
	resp, body = s.get(t, "/v1/ops/real/keys/k1", "dev-demo-key")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, string(body))
	resp, body = s.post(t, "/v1/ops/real", "acme-key-0123456789", "k1", `{"a":1}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	resp, body = s.get(t, "/v1/stats", "dev-demo-key")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
}

// TestServeDemoKeyNeverJoinsAConfiguredDemoTenant: a configured tenant
// named like the demo tenant keeps its own keys only; the public key is not
// one of them.
func TestServeDemoKeyNeverJoinsAConfiguredDemoTenant(t *testing.T) {
	t.Parallel()
	s := startServe(t, map[string]string{"IDEMGUARD_MODE": "development", "IDEMGUARD_LISTEN": "127.0.0.1:0",
		"IDEMGUARD_API_KEYS": "demo:" + auth.HashAPIKey("own-key-0123456789")},
		"scopes: [{name: demo, operation: demo, delay: 10ms}]\n")
	require.Contains(t, s.stderr.String(), "the public demo key is not added to it")
	require.Contains(t, s.stderr.String(), "The public demo key is not accepted: tenant demo is configured with its own API keys")
	require.NotContains(t, s.stderr.String(), "Bearer dev-demo-key", "the banner advertises no key that is refused")
	resp, body := s.post(t, "/v1/ops/demo", "dev-demo-key", "k1", `{"a":1}`)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, string(body))
	resp, body = s.post(t, "/v1/ops/demo", "own-key-0123456789", "k1", `{"a":1}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
}
