package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/routers/auth"
)

// The operator's routes are not on the API's listener by default: /metrics and /ops answer 404
// there (on the code before, /metrics answered 200 with every scope's counters, also to a browser
// of an allowed origin through CORS), and the operator listener serves them, without credential
// and without CORS headers.
func TestServeKeepsOperatorRoutesOffTheAPIListener(t *testing.T) {
	t.Parallel()
	s := startServe(t, map[string]string{"IDEMGUARD_LISTEN": "127.0.0.1:0", "IDEMGUARD_CORS_ORIGINS": "https://app.example.com"},
		"mode: development\nscopes: [{name: demo, operation: demo, delay: 1ms}]\n")
	require.NotEmpty(t, s.opsAddr)
	require.NotEqual(t, s.addr, s.opsAddr)
	require.Contains(t, s.stderr.String(), "http://"+s.opsAddr+"/ops", "the development banner names the operator page")
	for _, path := range []string{"/metrics", "/ops"} {
		req, err := http.NewRequest(http.MethodGet, "http://"+s.addr+path, nil)
		require.NoError(t, err)
		req.Header.Set("Origin", "https://app.example.com")
		resp, body := s.do(t, req)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s on the API listener: %s", path, body)
		require.NotContains(t, string(body), "idemguard_claims_total")
	}
	resp, body := s.operator(t, "/metrics")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `idemguard_claims_total{scope="demo"} 0`)
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
	resp, body = s.operator(t, "/ops")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotContains(t, string(body), "API key", "the operator page asks for no tenant's key")
	resp, _ = s.operator(t, "/v1/ops/demo")
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "the API is not on the operator listener")

	off := startServe(t, map[string]string{"IDEMGUARD_LISTEN": "127.0.0.1:0", "IDEMGUARD_METRICS_LISTEN": "off"},
		"scopes: [{name: demo, operation: demo, delay: 1ms}]\n")
	require.Empty(t, off.opsAddr)
	resp, _ = off.get(t, "/metrics", "")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// An http_json upstream learns which tenant asks (Idemguard-Tenant) and a pseudonym of the
// caller (Idemguard-Actor), never the API key or its name. On the code before, it got neither.
func TestServeTellsTheUpstreamWhoAsks(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"answer":"42"}`))
	}))
	t.Cleanup(up.Close)
	env := map[string]string{"IDEMGUARD_LISTEN": "127.0.0.1:0",
		"IDEMGUARD_API_KEYS": "acme:billing=" + auth.HashAPIKey("acme-key-0123456789") + ",globex:" + auth.HashAPIKey("globex-key-0123456789")}
	s := startServe(t, env, "mode: development\nupstream: {url: "+up.URL+"}\nscopes: [{name: lookup, operation: http_json}]\n")
	for _, key := range []string{"acme-key-0123456789", "globex-key-0123456789"} {
		resp, body := s.post(t, "/v1/ops/lookup", key, "", `{"order":7}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 2, "one run per tenant")
	require.Equal(t, "acme", got[0].Get("Idemguard-Tenant"))
	require.Equal(t, "globex", got[1].Get("Idemguard-Tenant"))
	for _, h := range got {
		require.Regexp(t, `^h:[0-9a-f]{32}$`, h.Get("Idemguard-Actor"))
		for name, values := range h {
			v := strings.Join(values, ",")
			require.NotContains(t, v, "key-0123456789", name)
			require.NotContains(t, v, "billing", name)
		}
	}
	require.NotEqual(t, got[0].Get("Idemguard-Actor"), got[1].Get("Idemguard-Actor"))
}
