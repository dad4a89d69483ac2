package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/internal/testlog"
	"github.com/idemguard/idemguard/routers/auth"
)

// served is an in-process `idemguard serve`.
type served struct {
	addr string
	// opsAddr is the operator listener's (metrics_listen): /metrics, /ops.
	opsAddr string
	stderr  *testlog.Buffer
	stop    context.CancelFunc // stands in for SIGTERM
	code    chan int
	client  *http.Client
}

const testSecret = "0123456789abcdef0123456789abcdef"

// productionEnv is a complete production configuration on dsn: tenant acme
// with the API key "acme-key", listening on a free loopback port.
func productionEnv(dsn string) map[string]string {
	return map[string]string{
		"IDEMGUARD_MODE":      "production",
		"IDEMGUARD_MYSQL_DSN": dsn,
		"IDEMPOTENCY_SECRET":  testSecret,
		"IDEMGUARD_API_KEYS":  "acme:" + auth.HashAPIKey("acme-key"),
		"IDEMGUARD_LISTEN":    "127.0.0.1:0",
	}
}

// startServe runs `idemguard serve --config <file>` in-process with environ
// only, and waits (bounded) for its "serve: listening" line.
func startServe(t *testing.T, environ map[string]string, configYAML string) *served {
	t.Helper()
	return startServeArgs(t, environ, configYAML)
}

// startServeArgs is startServe with more flags after --config.
func startServeArgs(t *testing.T, environ map[string]string, configYAML string, flags ...string) *served {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idemguard.yaml")
	require.NoError(t, os.WriteFile(path, []byte(configYAML), 0o600))
	if _, set := environ["IDEMGUARD_METRICS_LISTEN"]; !set {
		// A free port: parallel tests cannot all have the default 9090.
		environ = maps.Clone(environ)
		if environ == nil {
			environ = map[string]string{}
		}
		environ["IDEMGUARD_METRICS_LISTEN"] = "127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{stderr: &testlog.Buffer{}, stop: cancel, code: make(chan int, 1),
		client: &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}}
	go func() {
		s.code <- run(ctx, append([]string{"serve", "--config", path}, flags...), io.Discard, s.stderr, func(k string) string { return environ[k] })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.code:
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop within 30s")
		}
		s.client.CloseIdleConnections()
		if t.Failed() {
			t.Logf("serve stderr:\n%s", s.stderr.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for s.addr == "" {
		require.True(t, time.Now().Before(deadline), "no listening line within 20s; stderr:\n%s", s.stderr.String())
		select {
		case code := <-s.code:
			s.code <- code
			t.Fatalf("serve exited with %d before listening; stderr:\n%s", code, s.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		sc := bufio.NewScanner(strings.NewReader(s.stderr.String()))
		for sc.Scan() {
			var line struct {
				Msg, Addr    string
				OperatorAddr string `json:"operator_addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serve: listening" {
				s.addr, s.opsAddr = line.Addr, line.OperatorAddr
			}
		}
	}
	return s
}

func (s *served) post(t *testing.T, path, apiKey, key, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return s.do(t, req)
}

func (s *served) get(t *testing.T, path, apiKey string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+s.addr+path, nil)
	require.NoError(t, err)
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	return s.do(t, req)
}

// operator GETs path from the operator listener, without a credential.
func (s *served) operator(t *testing.T, path string) (*http.Response, []byte) {
	t.Helper()
	require.NotEmpty(t, s.opsAddr, "the operator listener is off")
	req, err := http.NewRequest(http.MethodGet, "http://"+s.opsAddr+path, nil)
	require.NoError(t, err)
	return s.do(t, req)
}

func (s *served) do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := s.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

func (s *served) wait(t *testing.T) int {
	t.Helper()
	select {
	case code := <-s.code:
		s.code <- code // for the cleanup
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return within 30s")
		return -1
	}
}

func TestServeQuickStartMatchesTheDocs(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "<!-- quickstart:begin -->\n```sh\n")
	require.True(t, ok, "README.md has the quickstart:begin marker")
	block, _, ok := strings.Cut(rest, "```\n<!-- quickstart:end -->")
	require.True(t, ok, "README.md has the quickstart:end marker")
	require.Equal(t, QuickStart("127.0.0.1:8080"), block, "the printed quick start and the documented one must not drift")
}

func TestServeRefusesBadConfiguration(t *testing.T) {
	t.Parallel()
	r := runCLI(t, map[string]string{"IDEMGUARD_MODE": "production"}, "serve")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "mysql_dsn: is required in production mode")
	require.Contains(t, r.stderr, "IDEMPOTENCY_SECRET is not set")
	require.Contains(t, r.stderr, "api_keys: production mode needs at least one tenant API key")

	r = runCLI(t, map[string]string{"IDEMGUARD_LISTEN": "nonsense"}, "serve")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "listen: must be host:port")

	r = runCLI(t, nil, "serve", "extra")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `unexpected argument "extra"`)

	r = runCLI(t, nil, "serve", "--nope")
	require.Equal(t, exitUsage, r.code)

	r = runCLI(t, nil, "serve", "-h")
	require.Equal(t, exitOK, r.code)
	require.Contains(t, r.stderr, "usage: idemguard serve")
}

func TestServeUnreachableDatabaseExitsOne(t *testing.T) {
	t.Parallel()
	r := runCLI(t, productionEnv("idem:pw-n0t-in-logs@tcp(127.0.0.1:1)/idemguard?timeout=2s"), "serve")
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "serve: cannot open the store")
	require.NotContains(t, r.stderr, "pw-n0t-in-logs")
}

func TestServeDevelopmentInMemory(t *testing.T) {
	t.Parallel()
	s := startServe(t, map[string]string{"IDEMGUARD_LISTEN": "127.0.0.1:0"},
		"scopes: [{name: demo, operation: demo, delay: 10ms}]\n")
	require.Contains(t, s.stderr.String(), "IDEMPOTENCY_SECRET is not set; using a random secret")
	require.Contains(t, s.stderr.String(), "API key: dev-demo-key")
	require.Contains(t, s.stderr.String(), QuickStart(s.addr), "the banner's commands name the real address")

	// Before the first request, every counter series is there at zero.
	resp, body := s.operator(t, "/metrics")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for _, zero := range []string{
		`idemguard_takeovers_total{scope="demo"} 0`,
		`idemguard_store_errors_total{op="commit",scope="demo"} 0`,
		`idemguard_http_requests_total{route="/v1/ops/:scope",status_class="5xx"} 0`,
	} {
		require.Contains(t, string(body), zero+"\n")
	}

	resp, body = s.post(t, "/v1/ops/demo", "dev-demo-key", "k1", `{"a":1}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), `"cached":false`)
	resp, body = s.post(t, "/v1/ops/demo", "dev-demo-key", "k1", `{"a":1}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
	require.Contains(t, string(body), `"cached":true`)

	resp, _ = s.post(t, "/v1/ops/demo", "wrong-key", "k1", `{"a":1}`)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	resp, _ = s.get(t, "/readyz", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "the in-memory store is always ready")
	resp, body = s.operator(t, "/metrics")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `idemguard_claims_total{scope="demo"} 1`)
	require.Contains(t, string(body), `idemguard_replays_total{from_memory="true",scope="demo"} 1`)
	require.Contains(t, string(body), `idemguard_http_requests_total{route="/v1/ops/:scope",status_class="2xx"} 2`)

	s.stop()
	require.Equal(t, exitOK, s.wait(t))
	require.Contains(t, s.stderr.String(), `"msg":"serve: stopped"`)
}

func TestServeProductionRefusesTheDemoKey(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	s := startServe(t, productionEnv(db.DSN), "scopes: [{name: demo, operation: demo, delay: 10ms}]\n")
	require.NotContains(t, s.stderr.String(), "dev-demo-key", "no banner in production")
	require.NotContains(t, s.stderr.String(), "no scopes configured")
	resp, _ := s.post(t, "/v1/ops/demo", "dev-demo-key", "k", `{}`)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, body := s.post(t, "/v1/ops/demo", "acme-key", "k", `{}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	resp, _ = s.get(t, "/readyz", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestServeProductionNotReadyWhileMigrationsPending(t *testing.T) {
	t.Parallel()
	db := testdb.NewEmpty(t)
	s := startServe(t, productionEnv(db.DSN), "")
	require.Contains(t, s.stderr.String(), "database migrations are pending")
	require.Contains(t, s.stderr.String(), `"level":"WARN","msg":"serve: production mode with no scopes configured`,
		"a production config without scopes answers 404 to every operation: say so at start")
	resp, _ := s.get(t, "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	var tables int
	require.NoError(t, db.DB.Get(&tables, "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()"))
	require.Zero(t, tables, "serve never migrates in production")

	r := runCLI(t, map[string]string{"IDEMGUARD_MYSQL_DSN": db.DSN}, "migrate", "up")
	require.Equal(t, exitOK, r.code, r.stderr)
	resp, _ = s.get(t, "/readyz", "")
	require.Equal(t, http.StatusOK, resp.StatusCode, "ready once migrated, without a restart")
}

func TestServeDevelopmentWithDatabaseMigrates(t *testing.T) {
	t.Parallel()
	db := testdb.NewEmpty(t)
	s := startServe(t, map[string]string{"IDEMGUARD_MODE": "development", "IDEMGUARD_MYSQL_DSN": db.DSN, "IDEMGUARD_LISTEN": "127.0.0.1:0"}, "")
	require.Contains(t, s.stderr.String(), "serve: development mode: database migrated")
	resp, _ := s.get(t, "/readyz", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// TestServeShutdownRecordsCutOffOperations: operations still running when
// the grace period ends are stored as failed, timeout under policy takeover
// (retryable) and abandoned under policy fail; their requests get the 502;
// serve exits 0.
func TestServeShutdownRecordsCutOffOperations(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	s := startServe(t, productionEnv(db.DSN), `
shutdown_grace: 300ms
scopes:
  - {name: slow, operation: demo, delay: 10m}
  - {name: once, operation: demo, delay: 10m, stale_policy: fail}
`)
	type answer struct {
		status int
		body   string
	}
	answers := make(chan answer, 2)
	for _, scope := range []string{"slow", "once"} {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/v1/ops/"+scope, strings.NewReader(`{}`))
			req.Header.Set("Authorization", "Bearer acme-key")
			req.Header.Set("Idempotency-Key", "cut-off")
			resp, err := s.client.Do(req)
			if err != nil {
				answers <- answer{status: -1, body: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- answer{resp.StatusCode, string(b)}
		}()
	}
	require.Eventually(t, func() bool {
		var n int
		return db.DB.Get(&n, "SELECT COUNT(*) FROM idempotency_keys WHERE status = 'started'") == nil && n == 2
	}, 10*time.Second, 10*time.Millisecond, "both operations running")

	start := time.Now()
	s.stop()
	require.Equal(t, exitOK, s.wait(t))
	require.Less(t, time.Since(start), 10*time.Second)

	got := map[string]string{}
	for range 2 {
		a := <-answers
		require.Equal(t, http.StatusBadGateway, a.status, a.body)
		var p struct{ StopReason string }
		require.NoError(t, json.Unmarshal([]byte(a.body), &p))
		got[p.StopReason] = a.body
	}
	require.Contains(t, got, "timeout")
	require.Contains(t, got, "abandoned")

	rows := map[string]string{}
	type row struct {
		Scope    string `db:"scope"`
		Status   string `db:"status"`
		Response string `db:"response_json"`
		Attempts int    `db:"attempt_count"`
	}
	var rs []row
	require.NoError(t, db.DB.Select(&rs, "SELECT scope, status, response_json, attempt_count FROM idempotency_keys"))
	require.Len(t, rs, 2)
	for _, r := range rs {
		require.Equal(t, "failed", r.Status)
		require.Equal(t, 1, r.Attempts)
		rows[r.Scope] = r.Response
	}
	require.JSONEq(t, `{"ok":false,"stopReason":"timeout","needsHuman":false,"cached":false}`, rows["slow"])
	require.JSONEq(t, `{"ok":false,"stopReason":"abandoned","needsHuman":false,"cached":false}`, rows["once"])
	require.Contains(t, s.stderr.String(), "serve: grace period over; cutting off the operations still running")
}
