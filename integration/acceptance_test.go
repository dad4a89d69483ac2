package integration

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/quickstart"
)

// 1. Fresh call → 200 with the envelope; the same request again → the same status and body
// byte for byte except cached:true, with Idempotent-Replayed: true; the upstream saw one call.
func TestFreshCallThenReplay(t *testing.T) {
	t.Parallel()
	db, llm, c := database(t), newFakeLLM(t), newClient(t)
	cfg := chatConfig(llm, "  - {name: chat, operation: openai_chat, key_required: true}\n", "")
	a := startService(t, productionEnv(db.DSN), cfg)
	b := startService(t, productionEnv(db.DSN), cfg)

	first := post(t, c, a, "chat", acmeKey, "order-1", chatBody)
	env := requireEnvelope(t, first)
	require.False(t, env.Cached)
	require.Equal(t, map[string]any{"text": "Heron launches in May.", "finish_reason": "stop",
		"prompt_tokens": 21.0, "completion_tokens": 6.0, "total_tokens": 27.0}, env.Data)
	require.Equal(t, "/v1/ops/chat/keys/order-1", first.header.Get("Location"))

	requireReplayOf(t, first, post(t, c, a, "chat", acmeKey, "order-1", chatBody))   // from the replay cache
	requireReplayOf(t, first, post(t, c, b, "chat", acmeKey, "order-1", chatBody))   // from MySQL, another process
	requireReplayOf(t, first, post(t, c, b, "chat", acmeKey, `"order-1"`, chatBody)) // the sf-string form is the same key
	require.EqualValues(t, 1, llm.calls.Load(), "the upstream saw one call")

	resp, rec := lookup(t, c, b, "chat", acmeKey, "order-1")
	require.Equal(t, http.StatusOK, resp.status, "lookup: %s", resp)
	require.Equal(t, "succeeded", rec.Status)
	require.Equal(t, 1, rec.AttemptCount)
	require.JSONEq(t, string(first.body), string(rec.Response))

	var stored string
	require.NoError(t, db.DB.Get(&stored, "SELECT response_json FROM idempotency_keys"))
	for _, never := range []string{model, prompt, "Project Heron", "chatcmpl", "fp_1"} {
		require.NotContains(t, stored, never, "the stored response holds no model, prompt or request id")
	}
	for _, s := range []*service{a, b} {
		require.NotContains(t, s.logs.String(), prompt, "prompts are never logged")
		require.NotContains(t, s.logs.String(), "order-1", "client keys are never logged")
		require.NotContains(t, s.logs.String(), acmeKey, "API keys are never logged")
	}
}

// 2. Bad requests: each a problem+json with ok:false and stopReason, none creating a row or
// calling the upstream.
func TestRejectedRequestsStoreNothing(t *testing.T) {
	t.Parallel()
	db, llm, c := database(t), newFakeLLM(t), newClient(t)
	s := startService(t, productionEnv(db.DSN), chatConfig(llm,
		"  - {name: chat, operation: openai_chat, key_required: true}\n  - {name: free, operation: openai_chat}\n",
		"max_body_bytes: 1024"))

	requireEnvelope(t, post(t, c, s, "chat", acmeKey, "k1", chatBody))
	require.Equal(t, 1, countRows(t, db))
	require.EqualValues(t, 1, llm.calls.Load())

	other := strings.Replace(chatBody, "64", "65", 1)
	big := `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`
	cases := []struct {
		name       string
		req        request
		status     int
		stopReason string
	}{
		{"same key, other body", request{path: "/v1/ops/chat", apiKey: acmeKey, key: "k1", body: other}, 422, "invalid_input"},
		{"malformed key", request{path: "/v1/ops/chat", apiKey: acmeKey, key: "bad key!", body: chatBody}, 400, "invalid_input"},
		{"key too long", request{path: "/v1/ops/chat", apiKey: acmeKey, key: strings.Repeat("k", 256), body: chatBody}, 400, "invalid_input"},
		{"two Idempotency-Key headers", request{path: "/v1/ops/chat", apiKey: acmeKey, body: chatBody,
			headers: [][2]string{{"Idempotency-Key", "k2"}, {"Idempotency-Key", "k3"}}}, 400, "invalid_input"},
		{"missing key on a key-required scope", request{path: "/v1/ops/chat", apiKey: acmeKey, body: chatBody}, 400, "invalid_input"},
		{"malformed JSON", request{path: "/v1/ops/chat", apiKey: acmeKey, key: "k4", body: `{"messages":[`}, 400, "invalid_input"},
		{"malformed JSON, derived key", request{path: "/v1/ops/free", apiKey: acmeKey, body: `{"a":}`}, 400, "invalid_input"},
		{"no API key", request{path: "/v1/ops/chat", key: "k5", body: chatBody}, 401, ""},
		{"bad API key", request{path: "/v1/ops/chat", apiKey: "not-a-key", key: "k5", body: chatBody}, 401, ""},
		{"unknown scope", request{path: "/v1/ops/nope", apiKey: acmeKey, key: "k6", body: chatBody}, 404, ""},
		{"body over the limit", request{path: "/v1/ops/chat", apiKey: acmeKey, key: "k7", body: big}, 413, "invalid_input"},
		{"body over the limit, derived key", request{path: "/v1/ops/free", apiKey: acmeKey, body: big}, 413, "invalid_input"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			requireProblem(t, do(t, c, s, tc.req), tc.status, tc.stopReason)
		})
	}
	require.Equal(t, 1, countRows(t, db), "no rejected request created a row")
	require.EqualValues(t, 1, llm.calls.Load(), "no rejected request called the upstream")
}

// 3. A request while the first is still running → 409 with Retry-After; with Prefer: wait=5 it
// returns the first call's result once that finishes.
func TestConcurrentDuplicateGets409OrWaits(t *testing.T) {
	t.Parallel()
	db, llm, c := database(t), newFakeLLM(t), newClient(t)
	release := make(chan struct{})
	llm.set(func(n int32, w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		complete(w, n)
	})
	s := startService(t, productionEnv(db.DSN), chatConfig(llm, "  - {name: chat, operation: openai_chat}\n", ""))

	firstDone := make(chan answer, 1)
	go func() {
		a, _ := tryDo(c, s, request{path: "/v1/ops/chat", apiKey: acmeKey, key: "slow-1", body: chatBody})
		firstDone <- a
	}()
	eventually(t, 10*time.Second, "the upstream got the first call", func() bool { return llm.calls.Load() == 1 })

	dup := post(t, c, s, "chat", acmeKey, "slow-1", chatBody)
	requireProblem(t, dup, http.StatusConflict, "in_progress")
	require.Equal(t, "1", dup.header.Get("Retry-After"))

	// The operation finishes a second after the waiting request was sent.
	waited := make(chan answer, 1)
	go func() {
		a, _ := tryDo(c, s, request{path: "/v1/ops/chat", apiKey: acmeKey, key: "slow-1", body: chatBody,
			headers: [][2]string{{"Prefer", "wait=5"}}})
		waited <- a
	}()
	time.AfterFunc(time.Second, func() { close(release) })

	first := <-firstDone
	requireEnvelope(t, first)
	w := <-waited
	requireReplayOf(t, first, w)
	require.Equal(t, "wait=5", w.header.Get("Preference-Applied"))
	require.EqualValues(t, 1, llm.calls.Load())
	m := do(t, c, s, request{method: http.MethodGet, path: "/metrics"})
	require.Contains(t, string(m.body), `idemguard_wait_seconds_count{scope="chat"} 1`, "the request did wait for the result")
}

// 4. Tenant B cannot read or replay tenant A's key: 404 on lookup; its own POST with the same
// key is an independent operation.
func TestTenantsAreIsolated(t *testing.T) {
	t.Parallel()
	db, llm, c := database(t), newFakeLLM(t), newClient(t)
	s := startService(t, productionEnv(db.DSN), chatConfig(llm, "  - {name: chat, operation: openai_chat}\n", ""))

	acme := post(t, c, s, "chat", acmeKey, "shared-key", chatBody)
	requireEnvelope(t, acme)

	resp, _ := lookup(t, c, s, "chat", globexKey, "shared-key")
	requireProblem(t, resp, http.StatusNotFound, "")
	resp, _ = lookup(t, c, s, "chat", globexKey, "~"+strings.Repeat("0", 64))
	requireProblem(t, resp, http.StatusNotFound, "")

	globex := post(t, c, s, "chat", globexKey, "shared-key", chatBody)
	require.False(t, requireEnvelope(t, globex).Cached, "globex's POST ran its own operation")
	require.Empty(t, globex.header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 2, llm.calls.Load())

	// Other inputs under the same key: a mismatch only within one tenant.
	other := strings.Replace(chatBody, "64", "65", 1)
	requireProblem(t, post(t, c, s, "chat", acmeKey, "shared-key", other), http.StatusUnprocessableEntity, "invalid_input")
	requireEnvelope(t, post(t, c, s, "chat", globexKey, "other-key", other))

	resp, rec := lookup(t, c, s, "chat", acmeKey, "shared-key")
	require.Equal(t, http.StatusOK, resp.status)
	require.Equal(t, "succeeded", rec.Status)
	require.Equal(t, 3, countRows(t, db))
}

// 5. Upstream failure → 502 provider_error; a retry with the same key runs the operation again
// and succeeds; after maxAttempts → retry_limit.
func TestFailureRetryAndRetryLimit(t *testing.T) {
	t.Parallel()
	db, llm, c := database(t), newFakeLLM(t), newClient(t)
	s := startService(t, productionEnv(db.DSN), chatConfig(llm, "  - {name: chat, operation: openai_chat, max_attempts: 3}\n", ""))

	llm.set(failWith(http.StatusInternalServerError))
	requireProblem(t, post(t, c, s, "chat", acmeKey, "flaky", chatBody), http.StatusBadGateway, "provider_error")
	llm.set(func(n int32, w http.ResponseWriter, _ *http.Request) { complete(w, n) })
	ok := post(t, c, s, "chat", acmeKey, "flaky", chatBody)
	require.False(t, requireEnvelope(t, ok).Cached, "the retry ran the operation again")
	require.EqualValues(t, 2, llm.calls.Load())
	_, rec := lookup(t, c, s, "chat", acmeKey, "flaky")
	require.Equal(t, 2, rec.AttemptCount)

	llm.set(failWith(http.StatusServiceUnavailable))
	for attempt := 1; attempt <= 3; attempt++ {
		requireProblem(t, post(t, c, s, "chat", acmeKey, "broken", chatBody), http.StatusBadGateway, "provider_error")
	}
	require.EqualValues(t, 5, llm.calls.Load())
	limit := post(t, c, s, "chat", acmeKey, "broken", chatBody)
	requireProblem(t, limit, http.StatusBadGateway, "retry_limit")
	require.EqualValues(t, 5, llm.calls.Load(), "no attempt left: the upstream is not called")
	_, rec = lookup(t, c, s, "chat", acmeKey, "broken")
	require.Equal(t, "failed", rec.Status)
	require.Equal(t, 3, rec.AttemptCount)

	llm.set(failWith(http.StatusTooManyRequests))
	requireProblem(t, post(t, c, s, "chat", acmeKey, "limited", chatBody), http.StatusBadGateway, "rate_limited")

	var stored []string
	require.NoError(t, db.DB.Select(&stored, "SELECT response_json FROM idempotency_keys"))
	for _, r := range stored {
		require.NotContains(t, r, prompt, "an upstream error echoing the prompt is not stored")
	}
	require.NotContains(t, s.logs.String(), prompt)
}

// 6. Three serve processes on one MariaDB, 300 concurrent requests with the same key spread
// across them → the upstream sees exactly one call; no 5xx.
func TestThreeProcessesRunOnce(t *testing.T) {
	t.Parallel()
	db, llm, c := database(t), newFakeLLM(t), newClient(t)
	llm.set(func(n int32, w http.ResponseWriter, r *http.Request) {
		select { // long enough for every request to arrive while it runs
		case <-time.After(time.Second):
		case <-r.Context().Done():
			return
		}
		complete(w, n)
	})
	cfg := chatConfig(llm, "  - {name: chat, operation: openai_chat}\n", "")
	services := []*service{
		startService(t, productionEnv(db.DSN), cfg),
		startService(t, productionEnv(db.DSN), cfg),
		startService(t, productionEnv(db.DSN), cfg),
	}

	const n = 300
	start := make(chan struct{})
	answers := make([]answer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i], errs[i] = tryDo(c, services[i%3], request{path: "/v1/ops/chat", apiKey: acmeKey, key: "stampede", body: chatBody})
		}()
	}
	close(start)
	wg.Wait()

	statuses := map[int]int{}
	for i := range n {
		require.NoError(t, errs[i])
		statuses[answers[i].status]++
		require.Less(t, answers[i].status, 500, "request %d: %s", i, answers[i])
		require.Contains(t, []int{http.StatusOK, http.StatusConflict}, answers[i].status, "request %d: %s", i, answers[i])
	}
	t.Logf("statuses of %d concurrent requests over 3 processes: %v", n, statuses)
	require.Positive(t, statuses[http.StatusOK])
	require.EqualValues(t, 1, llm.calls.Load(), "exactly one upstream call")

	var first answer
	for _, a := range answers {
		if a.status == http.StatusOK && a.header.Get("Idempotent-Replayed") == "" {
			first = a
		}
	}
	require.NotZero(t, first.status, "one answer is the fresh one")
	for _, s := range services {
		requireReplayOf(t, first, post(t, c, s, "chat", acmeKey, "stampede", chatBody))
	}
	require.Equal(t, 1, countRows(t, db))
}

// 7. kill -9 of the process running a slow operation → with staleAfter 2 s a later request
// takes over (attempt 2) and succeeds; the lookup shows attemptCount 2.
func TestKilledOwnerIsTakenOver(t *testing.T) {
	t.Parallel()
	db, llm, c := database(t), newFakeLLM(t), newClient(t)
	llm.set(func(n int32, w http.ResponseWriter, r *http.Request) {
		if n == 1 { // the first call hangs until its caller dies
			<-r.Context().Done()
			return
		}
		complete(w, n)
	})
	cfg := chatConfig(llm, "  - {name: chat, operation: openai_chat, stale_after: 2s}\n", "")
	a := startService(t, productionEnv(db.DSN), cfg)
	b := startService(t, productionEnv(db.DSN), cfg)

	go func() {
		_, _ = tryDo(c, a, request{path: "/v1/ops/chat", apiKey: acmeKey, key: "orphan", body: chatBody})
	}()
	eventually(t, 10*time.Second, "process A runs the operation", func() bool { return llm.calls.Load() == 1 })
	a.kill()

	requireProblem(t, post(t, c, b, "chat", acmeKey, "orphan", chatBody), http.StatusConflict, "in_progress")
	start := time.Now()
	took := post(t, c, b, "chat", acmeKey, "orphan", chatBody, [2]string{"Prefer", "wait=10"})
	require.False(t, requireEnvelope(t, took).Cached, "B ran the operation itself")
	t.Logf("taken over after %s", time.Since(start).Round(10*time.Millisecond))
	require.EqualValues(t, 2, llm.calls.Load())

	_, rec := lookup(t, c, b, "chat", acmeKey, "orphan")
	require.Equal(t, "succeeded", rec.Status)
	require.Equal(t, 2, rec.AttemptCount)
	// serve writes its log lines from a goroutine of its own, a moment
	// after the request that logged them may have been answered.
	eventually(t, 5*time.Second, "B logs the takeover", func() bool {
		return strings.Contains(b.logs.String(), "guard: took over a stale claim")
	})
}

// 8. MariaDB unreachable → /readyz 503 and POST 503 with Retry-After; the upstream is not called;
// when the database returns, the service recovers without a restart.
func TestDatabaseOutageFailsClosedAndRecovers(t *testing.T) {
	t.Parallel()
	db, llm, c := database(t), newFakeLLM(t), newClient(t)
	dsn := db.DSN
	proxy := newTCPProxy(t, mustAddr(t, dsn))
	s := startService(t, productionEnv(dsnVia(t, dsn, proxy.addr())),
		chatConfig(llm, "  - {name: chat, operation: openai_chat}\n", "unavailable_retry_after: 3s"))

	requireEnvelope(t, post(t, c, s, "chat", acmeKey, "before", chatBody))
	require.Equal(t, http.StatusOK, do(t, c, s, request{method: http.MethodGet, path: "/readyz"}).status)

	proxy.setCut(true)
	eventually(t, 15*time.Second, "/readyz answers 503", func() bool {
		return do(t, c, s, request{method: http.MethodGet, path: "/readyz"}).status == http.StatusServiceUnavailable
	})
	down := post(t, c, s, "chat", acmeKey, "during", chatBody)
	requireProblem(t, down, http.StatusServiceUnavailable, "")
	require.Equal(t, "3", down.header.Get("Retry-After"))
	require.EqualValues(t, 1, llm.calls.Load(), "fail closed: the operation did not run")
	// A stored success is still replayed from the process's memory.
	requireEnvelope(t, post(t, c, s, "chat", acmeKey, "before", chatBody))
	require.Equal(t, http.StatusOK, do(t, c, s, request{method: http.MethodGet, path: "/healthz"}).status)

	proxy.setCut(false)
	eventually(t, 15*time.Second, "/readyz answers 200 again", func() bool {
		return do(t, c, s, request{method: http.MethodGet, path: "/readyz"}).status == http.StatusOK
	})
	after := post(t, c, s, "chat", acmeKey, "during", chatBody)
	require.False(t, requireEnvelope(t, after).Cached)
	require.EqualValues(t, 2, llm.calls.Load())
	require.Equal(t, 2, countRows(t, db))
}

func mustAddr(t *testing.T, dsn string) string {
	t.Helper()
	i, j := strings.Index(dsn, "tcp("), strings.Index(dsn, ")/")
	require.True(t, i >= 0 && j > i, "DSN has a tcp(host:port) address")
	return dsn[i+4 : j]
}

// 9. `make run` on a fresh clone (no DSN, no network) serves the demo scope; the quick start's
// curl commands, copied as written, show a fresh call, a replay and a 409.
func TestQuickStartAsDocumented(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not installed: the quick start needs it (.ci/run installs it)", tool)
			}
			t.Skipf("%s not installed: the quick start needs it", tool)
		}
	}
	script := quickStartBlock(t)
	// What `make run` runs: development mode, no DSN, no config, no network.
	s := startService(t, map[string]string{"IDEMGUARD_MODE": "development", "IDEMGUARD_LISTEN": "127.0.0.1:0"}, "")
	require.Contains(t, s.logs.String(), `"store":"memory"`)
	eventually(t, 5*time.Second, "the banner shows the demo key", func() bool {
		return strings.Contains(s.logs.String(), "API key: dev-demo-key")
	})

	cmd := exec.Command("bash", "-c", strings.ReplaceAll(script, "127.0.0.1:8080", s.addr))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "quick start:\n%s", out)
	t.Logf("quick start output:\n%s", out)

	parts := strings.Split(string(out), "HTTP/1.1 ")[1:]
	require.Len(t, parts, 3, "three answers shown: %s", out)
	require.True(t, strings.HasPrefix(parts[0], "200 "), parts[0])
	require.Contains(t, parts[0], `"cached":false`)
	require.Contains(t, parts[0], `"text":"Demo answer `)
	require.True(t, strings.HasPrefix(parts[1], "200 "), parts[1])
	require.Contains(t, parts[1], "Idempotent-Replayed: true")
	require.Contains(t, parts[1], `"cached":true`)
	body := func(p string) string { return p[strings.Index(p, "{"):] }
	require.Equal(t, strings.Replace(body(parts[0]), `"cached":false`, `"cached":true`, 1), body(parts[1]))
	require.True(t, strings.HasPrefix(parts[2], "409 "), parts[2])
	require.Contains(t, parts[2], "Retry-After: ")
	require.Contains(t, parts[2], `"stopReason":"in_progress"`)
}

// quickStartBlock returns the shell block between the quickstart markers of README.md.
func quickStartBlock(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	block, err := quickstart.Block(string(doc))
	require.NoError(t, err)
	return block
}

// Shutdown (docs/CONFIGURATION.md): on SIGTERM an operation still running after shutdown_grace
// is stored as failed with stopReason timeout, its request gets the 502, the process exits 0,
// and the next request with the key runs it again.
func TestSIGTERMCutsOffRunningOperations(t *testing.T) {
	t.Parallel()
	db, llm, c := database(t), newFakeLLM(t), newClient(t)
	llm.set(func(n int32, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			<-r.Context().Done()
			return
		}
		complete(w, n)
	})
	cfg := chatConfig(llm, "  - {name: chat, operation: openai_chat}\n", "shutdown_grace: 500ms")
	s := startService(t, productionEnv(db.DSN), cfg)

	cut := make(chan answer, 1)
	go func() {
		a, err := tryDo(c, s, request{path: "/v1/ops/chat", apiKey: acmeKey, key: "cut", body: chatBody})
		if err != nil {
			a = answer{status: -1, body: []byte(err.Error())}
		}
		cut <- a
	}()
	eventually(t, 10*time.Second, "the operation runs", func() bool { return llm.calls.Load() == 1 })
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, s.waitExit(20*time.Second), "exit status")
	requireProblem(t, <-cut, http.StatusBadGateway, "timeout")

	var row struct {
		Status   string `db:"status"`
		Response string `db:"response_json"`
	}
	require.NoError(t, db.DB.Get(&row, "SELECT status, response_json FROM idempotency_keys"))
	require.Equal(t, "failed", row.Status)
	var env map[string]any
	require.NoError(t, json.Unmarshal([]byte(row.Response), &env))
	require.Equal(t, "timeout", env["stopReason"])
	require.Contains(t, s.logs.String(), "serve: grace period over")

	next := startService(t, productionEnv(db.DSN), cfg)
	require.False(t, requireEnvelope(t, post(t, c, next, "chat", acmeKey, "cut", chatBody)).Cached, "retryable: it runs again")
	_, rec := lookup(t, c, next, "chat", acmeKey, "cut")
	require.Equal(t, 2, rec.AttemptCount)
	require.EqualValues(t, 2, llm.calls.Load())
}

// Shutdown with the database unreachable: the cut-off outcome cannot be stored, so the process
// says so and exits 1; the row stays started, to be taken over once stale.
func TestSIGTERMWithDatabaseDownExitsOne(t *testing.T) {
	t.Parallel()
	db, llm, c := database(t), newFakeLLM(t), newClient(t)
	llm.set(func(n int32, w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	proxy := newTCPProxy(t, mustAddr(t, db.DSN))
	s := startService(t, productionEnv(dsnVia(t, db.DSN, proxy.addr())),
		chatConfig(llm, "  - {name: chat, operation: openai_chat}\n", "shutdown_grace: 300ms"))

	cut := make(chan answer, 1)
	go func() {
		a, err := tryDo(c, s, request{path: "/v1/ops/chat", apiKey: acmeKey, key: "unstored", body: chatBody})
		if err != nil {
			a = answer{status: -1, body: []byte(err.Error())}
		}
		cut <- a
	}()
	eventually(t, 10*time.Second, "the operation runs", func() bool { return llm.calls.Load() == 1 })
	proxy.setCut(true)
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 1, s.waitExit(30*time.Second), "exit status")
	requireProblem(t, <-cut, http.StatusBadGateway, "timeout")
	require.Contains(t, s.logs.String(), "could not all be stored")

	var status string
	require.NoError(t, db.DB.Get(&status, "SELECT status FROM idempotency_keys"))
	require.Equal(t, "started", status)
}

// The replay counts that `idemguard stats` reports come from the
// running service. One fresh call and three replays, a clean shutdown (the
// final flush), then stats: 3 replays of 4 requests is a 75% hit rate.
func TestStatsSeeTheServiceReplays(t *testing.T) {
	t.Parallel()
	db, llm, c := database(t), newFakeLLM(t), newClient(t)
	cfg := chatConfig(llm, "  - {name: chat, operation: openai_chat}\n", "")
	s := startService(t, productionEnv(db.DSN), cfg)
	first := post(t, c, s, "chat", acmeKey, "stats-1", chatBody)
	for range 3 {
		requireReplayOf(t, first, post(t, c, s, "chat", acmeKey, "stats-1", chatBody))
	}
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, s.waitExit(20*time.Second), "exit status")

	out, err := exec.Command(binary, "stats", "--dsn", db.DSN, "--since", "1h", "--json").Output()
	require.NoError(t, err, "stats exits 0: no threshold is breached")
	var report struct {
		TotalKeys    int64    `json:"total_keys"`
		CacheHitRate *float64 `json:"cache_hit_rate"`
		Counts       struct {
			Requests int64 `json:"requests"`
			Replays  int64 `json:"replays"`
		} `json:"counts"`
	}
	require.NoError(t, json.Unmarshal(out, &report), string(out))
	require.EqualValues(t, 1, report.TotalKeys)
	require.EqualValues(t, 4, report.Counts.Requests)
	require.EqualValues(t, 3, report.Counts.Replays)
	require.NotNil(t, report.CacheHitRate)
	require.InDelta(t, 0.75, *report.CacheHitRate, 1e-9)
	require.EqualValues(t, 1, llm.calls.Load())
}
