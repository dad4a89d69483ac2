package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHealthURL(t *testing.T) {
	t.Parallel()
	for listen, want := range map[string]string{
		"":               "http://127.0.0.1:8080/healthz",
		"0.0.0.0:8080":   "http://127.0.0.1:8080/healthz",
		":9090":          "http://127.0.0.1:9090/healthz",
		"[::]:8080":      "http://[::1]:8080/healthz",
		"10.0.0.7:8080":  "http://10.0.0.7:8080/healthz",
		"localhost:8081": "http://localhost:8081/healthz",
	} {
		got, err := healthURL(listen)
		require.NoError(t, err, listen)
		require.Equal(t, want, got, listen)
	}
	_, err := healthURL("8080")
	require.Error(t, err)
}

// health asks /healthz on the address of IDEMGUARD_LISTEN (loopback for 0.0.0.0) and exits 0
// only on a 200.
func TestHealth(t *testing.T) {
	t.Parallel()
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)

	r := runCLI(t, map[string]string{"IDEMGUARD_LISTEN": "0.0.0.0:" + port}, "health")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "ok: http://127.0.0.1:"+port+"/healthz\n", r.stdout)

	r = runCLI(t, nil, "health", "--url", srv.URL+"/elsewhere")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "404")

	status = http.StatusServiceUnavailable
	r = runCLI(t, map[string]string{"IDEMGUARD_LISTEN": "127.0.0.1:" + port}, "health")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "503")

	srv.Close()
	r = runCLI(t, map[string]string{"IDEMGUARD_LISTEN": "127.0.0.1:" + port}, "health", "--timeout", "1s")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "connection refused")

	require.Equal(t, exitUsage, runCLI(t, nil, "health", "extra").code)
	require.Equal(t, exitUsage, runCLI(t, map[string]string{"IDEMGUARD_LISTEN": "nonsense"}, "health").code)
}
