package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/internal/testlog"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/store"
)

// dropCounter counts drops by reason.
type dropCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *dropCounter) add(reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil {
		d.n = map[string]int{}
	}
	d.n[reason]++
}

func (d *dropCounter) get(reason string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[reason]
}

func auditEvent(i int) store.AuditEvent {
	return store.AuditEvent{ID: fmt.Sprintf("%032x", i), Kind: store.AuditReplay, At: time.Unix(int64(i), 0),
		Tenant: "acme", Scope: "chat", KeyHash: strings.Repeat("ab", 32), Attempt: 1, Actor: "key:billing"}
}

// decodeLines decodes JSON lines, failing on any line that is not exactly
// one JSON object.
func decodeLines(t *testing.T, text string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		require.NoError(t, dec.Decode(&m), "line %q", sc.Text())
		require.False(t, dec.More(), "more than one value on line %q", sc.Text())
		out = append(out, m)
	}
	require.NoError(t, sc.Err())
	return out
}

// TestAuditStreamWritesEveryEventAsALine: one JSON line per event, in
// order, each the event's own JSON (the key as its prefix only); Close
// writes what is queued.
func TestAuditStreamWritesEveryEventAsALine(t *testing.T) {
	t.Parallel()
	var out testlog.Buffer
	var drops dropCounter
	a := newAuditStream(&out, nil, 1000, drops.add)
	for i := range 500 {
		a.Observe(auditEvent(i))
	}
	require.NoError(t, a.Close())
	require.NoError(t, a.Close(), "a second Close is harmless")
	lines := decodeLines(t, out.String())
	require.Len(t, lines, 500)
	for i, l := range lines {
		want, err := json.Marshal(auditEvent(i))
		require.NoError(t, err)
		var w map[string]any
		require.NoError(t, json.Unmarshal(want, &w))
		require.Equal(t, w, l)
	}
	require.Equal(t, strings.Repeat("ab", 8), lines[0]["keyPrefix"])
	require.NotContains(t, out.String(), strings.Repeat("ab", 9), "more of the key hash than its prefix")
	require.Zero(t, drops.get(metrics.AuditDropQueueFull))
}

// blockingWriter blocks every Write until release is closed.
type blockingWriter struct {
	entered chan struct{}
	release chan struct{}
	mu      sync.Mutex
	lines   int
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	select {
	case w.entered <- struct{}{}:
	default:
	}
	<-w.release
	w.mu.Lock()
	w.lines += strings.Count(string(p), "\n")
	w.mu.Unlock()
	return len(p), nil
}

// TestAuditStreamNeverBlocks: a sink that hangs never holds up Observe:
// past the queue's capacity events are dropped and counted queue_full.
func TestAuditStreamNeverBlocks(t *testing.T) {
	t.Parallel()
	w := &blockingWriter{entered: make(chan struct{}, 1), release: make(chan struct{})}
	var drops dropCounter
	a := newAuditStream(w, nil, 4, drops.add)
	a.Observe(auditEvent(0))
	<-w.entered // the writer holds event 0 and hangs
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= 14; i++ {
			a.Observe(auditEvent(i))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Observe blocked on a hanging sink")
	}
	require.Equal(t, 10, drops.get(metrics.AuditDropQueueFull), "4 queued, 10 dropped")
	close(w.release)
	require.NoError(t, a.Close())
	require.Equal(t, 5, w.lines)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestAuditStreamCountsWriteErrors(t *testing.T) {
	t.Parallel()
	var drops dropCounter
	a := newAuditStream(failingWriter{}, nil, 100, drops.add)
	for i := range 7 {
		a.Observe(auditEvent(i))
	}
	require.NoError(t, a.Close())
	require.Equal(t, 7, drops.get(metrics.AuditDropWriteError))
}

// TestAuditStreamFile: a file stream is appended to, created 0600.
func TestAuditStreamFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(`{"earlier":"line"}`+"\n"), 0o600))
	require.NoError(t, os.Chmod(path, 0o600))
	var drops dropCounter
	a, err := openAuditStream(path, nil, nil, drops.add)
	require.NoError(t, err)
	a.Observe(auditEvent(1))
	require.NoError(t, a.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := decodeLines(t, string(b))
	require.Len(t, lines, 2, "appended, not truncated")
	require.Equal(t, "line", lines[0]["earlier"])

	fresh := filepath.Join(t.TempDir(), "new.jsonl")
	a, err = openAuditStream(fresh, nil, nil, drops.add)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	st, err := os.Stat(fresh)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	a, err = openAuditStream("off", nil, nil, drops.add)
	require.NoError(t, err)
	require.Nil(t, a)
	_, err = openAuditStream(filepath.Join(t.TempDir(), "no", "such", "dir", "a.jsonl"), nil, nil, drops.add)
	require.Error(t, err)
}

// Canaries of the serve-level tests: none may reach the audit stream, the
// history answer or the log.
const (
	serveCanaryAPIKey    = "CANARY-serve-api-key-91c2e7"
	serveCanaryClientKey = "CANARY-serve-client-key-4d"
	serveCanaryPrompt    = "CANARY serve prompt: my password is hunter2"
)

// auditServe starts serve on MySQL (production mode) with the audit stream
// in a file and acme's canaryAPIKey named "billing".
func auditServe(t *testing.T, extra map[string]string, flags ...string) (*served, string) {
	t.Helper()
	db := testdb.New(t)
	env := productionEnv(db.DSN)
	env["IDEMGUARD_API_KEYS"] = "acme:billing=" + auth.HashAPIKey(serveCanaryAPIKey) + ",beta:" + auth.HashAPIKey("beta-key")
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	env["IDEMGUARD_AUDIT_LOG"] = path
	for k, v := range extra {
		env[k] = v
	}
	return startServeArgs(t, env, "scopes: [{name: demo, operation: demo, delay: 1ms}]\n", flags...), path
}

// TestServeAuditTrail: on MySQL, a claim and a replay are claimed then
// replay in the audit stream (valid JSON lines) and in the key's history,
// named by the API key's configured name; another tenant gets a 404; no
// canary (API key, client key, prompt) reaches the stream, the history or
// the log; the events are counted on /metrics. This needs the engine's
// events and the MySQL audit table.
func TestServeAuditTrail(t *testing.T) {
	t.Parallel()
	s, path := auditServe(t, nil)
	body := `{"prompt":"` + serveCanaryPrompt + `"}`
	for range 2 {
		resp, b := s.post(t, "/v1/ops/demo", serveCanaryAPIKey, serveCanaryClientKey, body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	}
	hist := "/v1/ops/demo/keys/" + serveCanaryClientKey + "/history"
	var (
		resp   *http.Response
		answer []byte
		events struct {
			Events []map[string]any `json:"events"`
		}
	)
	deadline := time.Now().Add(10 * time.Second) // the replay is written in a batch: poll
	for {
		resp, answer = s.get(t, hist, serveCanaryAPIKey)
		if resp.StatusCode == http.StatusOK {
			require.NoError(t, json.Unmarshal(answer, &events))
		}
		if len(events.Events) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, http.StatusOK, resp.StatusCode, string(answer))
	var kinds []string
	for _, e := range events.Events {
		kinds = append(kinds, e["kind"].(string))
		require.Equal(t, "key:billing", e["actor"])
	}
	require.Equal(t, []string{"claimed", "replay"}, kinds)

	other, b := s.get(t, hist, "beta-key")
	require.Equal(t, http.StatusNotFound, other.StatusCode, string(b))

	_, metricsText := s.operator(t, "/metrics")
	require.Contains(t, string(metricsText), `idemguard_audit_events_total{kind="claimed"} 1`)

	s.stop() // Close flushes the stream
	require.Equal(t, exitOK, s.wait(t))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := decodeLines(t, string(raw))
	ids := map[string]string{}
	for _, l := range lines {
		ids[l["id"].(string)] = l["kind"].(string)
	}
	for _, e := range events.Events {
		require.Equal(t, e["kind"], ids[e["id"].(string)], "the history's event is not in the stream")
	}
	for _, text := range []string{string(raw), string(answer), s.stderr.String()} {
		for _, canary := range []string{serveCanaryAPIKey, serveCanaryClientKey, serveCanaryPrompt, "CANARY"} {
			require.NotContains(t, text, canary)
		}
	}
}

// TestServeAuditSwitches: audit.table false keeps the trail out of the
// table (the history is a 404) while the stream still gets it; a flag wins
// over the environment; --audit-log "" is a usage error.
func TestServeAuditSwitches(t *testing.T) {
	t.Parallel()
	res := runCLI(t, nil, "serve", "--audit-log", "")
	require.Equal(t, exitUsage, res.code, res.stderr)
	require.Contains(t, res.stderr, "--audit-log must be off, stdout, stderr or a file path")

	for name, tc := range map[string]struct {
		env   map[string]string
		flags []string
		table bool
	}{
		"environment off": {env: map[string]string{"IDEMGUARD_AUDIT_TABLE": "false"}},
		"flag off":        {flags: []string{"--audit-table=false"}},
		"flag wins":       {env: map[string]string{"IDEMGUARD_AUDIT_TABLE": "false"}, flags: []string{"--audit-table=true"}, table: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, path := auditServe(t, tc.env, tc.flags...)
			require.Contains(t, s.stderr.String(), fmt.Sprintf(`"msg":"serve: audit trail on","audit_table":%t,"audit_log":%q`, tc.table, path))
			resp, b := s.post(t, "/v1/ops/demo", serveCanaryAPIKey, "switch-1", `{}`)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			if !tc.table {
				resp, b = s.get(t, "/v1/ops/demo/keys/switch-1/history", serveCanaryAPIKey)
				require.Equal(t, http.StatusNotFound, resp.StatusCode, string(b))
			}
		})
	}
}

// TestServeAuditOffOnTheMemoryStore: the in-memory store writes no table
// and, without --audit-log, auditing is off altogether.
func TestServeAuditOffOnTheMemoryStore(t *testing.T) {
	t.Parallel()
	s := startServe(t, map[string]string{"IDEMGUARD_LISTEN": "127.0.0.1:0"}, "")
	require.Contains(t, s.stderr.String(), `"msg":"serve: audit trail off"`)
	out := filepath.Join(t.TempDir(), "audit.jsonl")
	s = startServeArgs(t, map[string]string{"IDEMGUARD_LISTEN": "127.0.0.1:0"}, "", "--audit-log", out)
	require.Contains(t, s.stderr.String(), `"msg":"serve: audit trail on","audit_table":false`)
	_, err := os.Stat(out)
	require.NoError(t, err, "the stream's file is created at start")
}
