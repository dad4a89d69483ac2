package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/routers/auth"
)

// binary is the idemguard executable built by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idemguard-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "idemguard")
	build := exec.Command("go", "build", "-o", binary, "github.com/idemguard/idemguard/cmd/idemguard")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "integration: building the binary:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "integration: goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Tenants and their API keys, as production configures them.
const (
	acmeKey   = "acme-api-key-0001"
	globexKey = "globex-api-key-0002"
	secret    = "integration-secret-0123456789abcdef"
	model     = "fake-model-7b-SECRET-NAME"
)

// The prompt of chatBody; it must never reach the table or the logs.
const prompt = "Summarize the confidential launch plan for Project Heron"

const chatBody = `{"messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":64}`

// ---------------------------------------------------------------------------
// The service under test.

// service is one `idemguard serve` process.
type service struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr string
	// opsAddr is the operator listener's (metrics_listen): /metrics, /ops.
	opsAddr string
	logs    *logBuffer
	exited  chan struct{}
	state   *os.ProcessState
}

// logBuffer collects a process's stderr and finds its listening line.
type logBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	addr    chan string
	opsAddr string // the operator listener's, from the same line
	found   bool
}

func (b *logBuffer) consume(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		b.mu.Lock()
		b.buf.Write(line)
		b.buf.WriteByte('\n')
		found := b.found
		b.mu.Unlock()
		if found {
			continue
		}
		var l struct {
			Msg, Addr    string
			OperatorAddr string `json:"operator_addr"`
		}
		if json.Unmarshal(line, &l) == nil && l.Msg == "serve: listening" && l.Addr != "" {
			b.mu.Lock()
			b.found, b.opsAddr = true, l.OperatorAddr
			b.mu.Unlock()
			b.addr <- l.Addr
		}
	}
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startService starts `idemguard serve --config <configYAML>` (no --config when it is "") with exactly the environment env
// (plus PATH), and waits, bounded, for its listening line. The process is killed when the test
// ends; its log is printed if the test failed.
func startService(t *testing.T, env map[string]string, configYAML string) *service {
	t.Helper()
	args := []string{"serve"}
	if configYAML != "" {
		path := filepath.Join(t.TempDir(), "idemguard.yaml")
		require.NoError(t, os.WriteFile(path, []byte(configYAML), 0o600))
		args = append(args, "--config", path)
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if _, set := env["IDEMGUARD_METRICS_LISTEN"]; !set {
		// A free port for the operator listener: parallel services cannot all have 9090.
		cmd.Env = append(cmd.Env, "IDEMGUARD_METRICS_LISTEN=127.0.0.1:0")
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	s := &service{t: t, cmd: cmd, logs: &logBuffer{addr: make(chan string, 1)}, exited: make(chan struct{})}
	require.NoError(t, cmd.Start())
	consumed := make(chan struct{})
	go func() { s.logs.consume(stderr); close(consumed) }()
	go func() {
		<-consumed // Wait closes the pipe: read it to the end first
		_ = cmd.Wait()
		s.state = cmd.ProcessState
		close(s.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("idemguard serve (pid %d) did not exit after SIGKILL", cmd.Process.Pid)
		}
		if t.Failed() {
			t.Logf("idemguard serve (pid %d) log:\n%s", cmd.Process.Pid, s.logs.String())
		}
	})

	select {
	case s.addr = <-s.logs.addr:
		s.logs.mu.Lock()
		s.opsAddr = s.logs.opsAddr
		s.logs.mu.Unlock()
	case <-s.exited:
		t.Fatalf("idemguard serve exited (%v) before listening; log:\n%s", s.state, s.logs.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("idemguard serve did not log its address within 20s; log:\n%s", s.logs.String())
	}
	return s
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *service) kill() {
	s.t.Helper()
	require.NoError(s.t, s.cmd.Process.Signal(syscall.SIGKILL))
	s.waitExit(10 * time.Second)
}

// waitExit waits for the process to exit and returns its exit code.
func (s *service) waitExit(timeout time.Duration) int {
	s.t.Helper()
	select {
	case <-s.exited:
		return s.state.ExitCode()
	case <-time.After(timeout):
		s.t.Fatalf("idemguard serve did not exit within %s", timeout)
		return -1
	}
}

// url is path on the API's listener, or, for /metrics, on the operator listener (serve never
// serves /metrics on the API's).
func (s *service) url(path string) string {
	if path == "/metrics" {
		return "http://" + s.opsAddr + path
	}
	return "http://" + s.addr + path
}

// ---------------------------------------------------------------------------
// HTTP

// client has its own transport so that its connections can be closed at the end (goleak).
func newClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) String() string { return fmt.Sprintf("%d %s", a.status, a.body) }

// problem decodes a problem+json answer.
type problem struct {
	Type       string `json:"type"`
	Status     int    `json:"status"`
	OK         *bool  `json:"ok"`
	StopReason string `json:"stopReason"`
}

// request is one API call; header values may repeat a name (two Idempotency-Key headers).
type request struct {
	method, path string
	apiKey       string
	key          string
	headers      [][2]string
	body         string
}

func do(t *testing.T, c *http.Client, s *service, r request) answer {
	t.Helper()
	a, err := tryDo(c, s, r)
	require.NoError(t, err)
	return a
}

func tryDo(c *http.Client, s *service, r request) (answer, error) {
	method := r.method
	if method == "" {
		method = http.MethodPost
	}
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	req, err := http.NewRequest(method, s.url(r.path), body)
	if err != nil {
		return answer{}, err
	}
	if r.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.apiKey)
	}
	if r.key != "" {
		req.Header.Set("Idempotency-Key", r.key)
	}
	if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range r.headers {
		req.Header.Add(h[0], h[1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

func post(t *testing.T, c *http.Client, s *service, scope, apiKey, key, body string, headers ...[2]string) answer {
	t.Helper()
	return do(t, c, s, request{path: "/v1/ops/" + scope, apiKey: apiKey, key: key, body: body, headers: headers})
}

// requireProblem checks a problem+json answer with ok:false and the stop reason.
func requireProblem(t *testing.T, a answer, status int, stopReason string) problem {
	t.Helper()
	require.Equal(t, status, a.status, "answer: %s", a)
	require.Equal(t, "application/problem+json", a.header.Get("Content-Type"), "answer: %s", a)
	var p problem
	require.NoError(t, json.Unmarshal(a.body, &p), "answer: %s", a)
	require.NotNil(t, p.OK, "answer: %s", a)
	require.False(t, *p.OK)
	require.Equal(t, status, p.Status)
	if stopReason != "" {
		require.Equal(t, stopReason, p.StopReason, "answer: %s", a)
	} else {
		require.NotEmpty(t, p.StopReason, "answer: %s", a)
	}
	return p
}

// envelope decodes a 200 answer.
type envelope struct {
	OK         bool           `json:"ok"`
	StopReason string         `json:"stopReason"`
	Cached     bool           `json:"cached"`
	Data       map[string]any `json:"data"`
}

func requireEnvelope(t *testing.T, a answer) envelope {
	t.Helper()
	require.Equal(t, http.StatusOK, a.status, "answer: %s", a)
	require.Equal(t, "application/json", a.header.Get("Content-Type"))
	var e envelope
	require.NoError(t, json.Unmarshal(a.body, &e), "answer: %s", a)
	require.True(t, e.OK)
	require.Equal(t, "completed", e.StopReason)
	return e
}

// requireReplayOf checks that replay is first, byte for byte, except "cached":true, with the
// replay headers.
func requireReplayOf(t *testing.T, first, replay answer) {
	t.Helper()
	require.Equal(t, first.status, replay.status, "replay: %s", replay)
	require.Equal(t, 1, bytes.Count(first.body, []byte(`"cached":false`)), "first: %s", first)
	want := bytes.Replace(first.body, []byte(`"cached":false`), []byte(`"cached":true`), 1)
	require.Equal(t, string(want), string(replay.body))
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	require.Empty(t, first.header.Get("Idempotent-Replayed"))
}

// keyRecord is the answer of GET /v1/ops/{scope}/keys/{key}.
type keyRecord struct {
	Status       string          `json:"status"`
	AttemptCount int             `json:"attemptCount"`
	Response     json.RawMessage `json:"response"`
}

func lookup(t *testing.T, c *http.Client, s *service, scope, apiKey, key string) (answer, keyRecord) {
	t.Helper()
	a := do(t, c, s, request{method: http.MethodGet, path: "/v1/ops/" + scope + "/keys/" + key, apiKey: apiKey})
	var rec keyRecord
	if a.status == http.StatusOK {
		require.NoError(t, json.Unmarshal(a.body, &rec), "answer: %s", a)
	}
	return a, rec
}

// eventually polls cond every 20ms until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// Database

// database is a fresh, empty test database migrated by the binary (`idemguard migrate up`).
func database(t *testing.T) *testdb.Database {
	t.Helper()
	db := testdb.NewEmpty(t)
	out, err := exec.Command(binary, "migrate", "up", "--dsn", db.DSN).CombinedOutput()
	require.NoError(t, err, "idemguard migrate up: %s", out)
	return db
}

func countRows(t *testing.T, db *testdb.Database) int {
	t.Helper()
	var n int
	require.NoError(t, db.DB.Get(&n, "SELECT COUNT(*) FROM idempotency_keys"))
	return n
}

// productionEnv configures a production service on dsn with the tenants acme and globex.
func productionEnv(dsn string) map[string]string {
	return map[string]string{
		"IDEMGUARD_MODE":      "production",
		"IDEMGUARD_LISTEN":    "127.0.0.1:0",
		"IDEMGUARD_MYSQL_DSN": dsn,
		"IDEMPOTENCY_SECRET":  secret,
		"IDEMGUARD_API_KEYS":  "acme:" + auth.HashAPIKey(acmeKey) + ",globex:" + auth.HashAPIKey(globexKey),
		// The fake upstreams are http:// on loopback.
		"IDEMGUARD_ALLOW_INSECURE_UPSTREAMS": "true",
	}
}

// chatConfig is a config with openai_chat scopes against the fake upstream; extra is appended
// (more scopes or settings, YAML at top level after `scopes:` items).
func chatConfig(llm *fakeLLM, scopes string, extra string) string {
	return fmt.Sprintf("openai: {base_url: %q, model: %q, timeout: 20s}\nstore_timeout: 2s\n%s\nscopes:\n%s",
		llm.srv.URL+"/v1", model, extra, scopes)
}

// ---------------------------------------------------------------------------
// The fake OpenAI-compatible upstream.

// fakeLLM answers POST /v1/chat/completions and counts the calls. behave decides each call's
// answer (call numbers start at 1); the default is a completion.
type fakeLLM struct {
	srv    *httptest.Server
	calls  atomic.Int32
	behave atomic.Pointer[func(n int32, w http.ResponseWriter, r *http.Request)]
}

func newFakeLLM(t *testing.T) *fakeLLM {
	t.Helper()
	f := &fakeLLM{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		var req struct {
			Model    string `json:"model"`
			Messages []any  `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != model || len(req.Messages) == 0 {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		n := f.calls.Add(1)
		if b := f.behave.Load(); b != nil {
			(*b)(n, w, r)
			return
		}
		complete(w, n)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeLLM) set(b func(n int32, w http.ResponseWriter, r *http.Request)) { f.behave.Store(&b) }

// complete writes a completion, with the fields a provider sends that must never be stored.
func complete(w http.ResponseWriter, n int32) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"chatcmpl-%d","object":"chat.completion","model":%q,"system_fingerprint":"fp_1",
"choices":[{"index":0,"message":{"role":"assistant","content":"Heron launches in May."},"finish_reason":"stop"}],
"usage":{"prompt_tokens":21,"completion_tokens":6,"total_tokens":27}}`, n, model)
}

// failWith answers status with a body that echoes the prompt, as some providers do.
func failWith(status int) func(int32, http.ResponseWriter, *http.Request) {
	return func(_ int32, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"message":"failed on: %s"}}`, prompt)
	}
}

// ---------------------------------------------------------------------------
// A TCP proxy between serve and MySQL that the test can cut and restore.

type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &tcpProxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.closeAll()
		p.wg.Wait()
	})
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			_ = c.Close() // the database is "unreachable": the handshake fails at once
			continue
		}
		up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *tcpProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

func (p *tcpProxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// setCut cuts (every open connection is closed, new ones are refused) or restores the path.
func (p *tcpProxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	p.mu.Unlock()
	if cut {
		p.closeAll()
	}
}

// dsnVia returns dsn with its address replaced by addr.
func dsnVia(t *testing.T, dsn, addr string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	cfg.Addr = addr
	return cfg.FormatDSN()
}
