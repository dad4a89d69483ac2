package routers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/reqlog"
	"github.com/idemguard/idemguard/internal/testlog"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/sanitize"
)

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth, err := auth.NewAuthenticator(nil)
	require.NoError(t, err)
	run := func(context.Context, json.RawMessage) (any, error) { return nil, nil }
	good := Options{Guard: b.guard, Scopes: []Scope{{Name: "a", Run: run}}, Auth: auth}
	for name, tc := range map[string]struct {
		mutate func(*Options)
		want   string
	}{
		"no guard":       {func(o *Options) { o.Guard = nil }, "Options.Guard is required"},
		"bad scope name": {func(o *Options) { o.Scopes = []Scope{{Name: "a b", Run: run}} }, `Options.Scopes[0] "a b"`},
		"scope twice":    {func(o *Options) { o.Scopes = append(o.Scopes, Scope{Name: "a", Run: run}) }, `Options.Scopes[1]: scope "a" is listed twice`},
		"scope no run":   {func(o *Options) { o.Scopes = []Scope{{Name: "a"}} }, `Options.Scopes[0] "a" has no Run`},
		"scope settings": {func(o *Options) {
			o.Scopes = []Scope{{Name: "a", Run: run, Settings: idemguard.Settings{MaxAttempts: -1}}}
		}, "MaxAttempts"},
		"prefix slash":   {func(o *Options) { o.Prefix = "/api/" }, "Options.Prefix"},
		"prefix no lead": {func(o *Options) { o.Prefix = "api" }, "Options.Prefix"},
		"no auth":        {func(o *Options) { o.Auth = nil }, "Options.Auth is required"},
		"negative body":  {func(o *Options) { o.MaxBodyBytes = -1 }, "Options.MaxBodyBytes"},
		"negative wait":  {func(o *Options) { o.MaxWait = -time.Second }, "Options.MaxWait"},
		"negative retry": {func(o *Options) { o.RetryAfter = -time.Second }, "Options.RetryAfter"},
		"negative 503":   {func(o *Options) { o.UnavailableRetryAfter = -1 }, "Options.UnavailableRetryAfter"},
		"wildcard":       {func(o *Options) { o.CORSOrigins = []string{"*"} }, `Options.CORSOrigins[0] "*": wildcards`},
		"path":           {func(o *Options) { o.CORSOrigins = []string{"https://a.example", "https://b.example/"} }, "Options.CORSOrigins[1]"},
		"no scheme":      {func(o *Options) { o.CORSOrigins = []string{"app.example.com"} }, "scheme must be http or https"},
		"ftp":            {func(o *Options) { o.CORSOrigins = []string{"ftp://app.example.com"} }, "scheme must be http or https"},
		"user":           {func(o *Options) { o.CORSOrigins = []string{"https://u@app.example.com"} }, "scheme://host"},
		"query":          {func(o *Options) { o.CORSOrigins = []string{"https://app.example.com?x=1"} }, "no path, query"},
	} {
		o := good
		tc.mutate(&o)
		h, err := New(o)
		require.ErrorContains(t, err, tc.want, name)
		require.Nil(t, h, name)
	}
	o := good
	o.CORSOrigins = []string{"https://app.example.com", "http://localhost:5173"}
	h, err := New(o)
	require.NoError(t, err)
	require.NotNil(t, h)
}

func TestFreshCallAndReplay(t *testing.T) {
	t.Parallel()
	for name, cacheSize := range map[string]int{"replay from memory": 0, "replay from store": -1} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{guard: func(c *idemguard.Config) { c.ReplayCacheSize = cacheSize }})

			first := b.post("echo", "order-1", `{"n": 1.50, "q": "x"}`)
			require.Equal(t, http.StatusOK, first.Code, first.Body.String())
			require.Equal(t, "application/json", first.Header().Get("Content-Type"))
			require.Equal(t, `{"ok":true,"stopReason":"completed","createdActionRequestIds":[7,8],"traceId":"trace-1",`+
				`"needsHuman":false,"cached":false,"data":{"n":1.5,"text":"<b>café</b> & co"}}`, first.Body.String())
			require.Empty(t, first.Header().Get("Idempotent-Replayed"))
			require.Empty(t, first.Header().Get("Idempotent-Completed-At"))
			require.Equal(t, "/v1/ops/echo/keys/order-1", first.Header().Get("Location"))
			require.Equal(t, "order-1", first.Header().Get("Idempotency-Key-Ref"))

			// The same request again, the key as an sf-string and the body
			// re-ordered: the same inputs.
			for i, again := range []*httptest.ResponseRecorder{
				b.post("echo", "order-1", `{"n": 1.50, "q": "x"}`),
				b.post("echo", `"order-1"`, "{\"q\":\"x\",\n \"n\":1.50}"),
			} {
				require.Equal(t, http.StatusOK, again.Code, "replay %d", i)
				require.Equal(t, first.Body.String(), string(asFresh(again.Body.Bytes())), "replay %d", i)
				require.Contains(t, again.Body.String(), `"cached":true`)
				require.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
				completed, err := time.Parse(time.RFC3339Nano, again.Header().Get("Idempotent-Completed-At"))
				require.NoError(t, err)
				require.True(t, strings.HasSuffix(again.Header().Get("Idempotent-Completed-At"), "Z"))
				require.WithinDuration(t, time.Now(), completed, time.Minute)
				require.Equal(t, "/v1/ops/echo/keys/order-1", again.Header().Get("Location"))
				require.Equal(t, "order-1", again.Header().Get("Idempotency-Key-Ref"))
			}
			require.EqualValues(t, 1, b.calls["echo"].Load())
			require.Len(t, b.store.Rows(), 1)
		})
	}
}

func TestStoredStatusCodeIsReplayed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.post("created", "c-1", `{}`)
	require.Equal(t, http.StatusCreated, first.Code)
	again := b.post("created", "c-1", `{}`)
	require.Equal(t, http.StatusCreated, again.Code)
	require.Equal(t, first.Body.String(), string(asFresh(again.Body.Bytes())))
	require.EqualValues(t, 1, b.calls["created"].Load())
}

func TestDerivedKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.post("echo", "", `{"n":1,"q":"same"}`)
	require.Equal(t, http.StatusOK, first.Code)
	ref := first.Header().Get("Idempotency-Key-Ref")
	require.Regexp(t, `^~[0-9a-f]{64}$`, ref)
	require.Equal(t, "/v1/ops/echo/keys/"+ref, first.Header().Get("Location"))

	// The same inputs in another order and spacing derive the same key.
	again := b.post("echo", "", `{ "q":"same", "n":1 }`)
	require.Equal(t, http.StatusOK, again.Code)
	require.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
	require.Equal(t, ref, again.Header().Get("Idempotency-Key-Ref"))
	require.Equal(t, first.Body.String(), string(asFresh(again.Body.Bytes())))

	// Other inputs: another key, another run.
	other := b.post("echo", "", `{"n":2,"q":"same"}`)
	require.Equal(t, http.StatusOK, other.Code)
	require.NotEqual(t, ref, other.Header().Get("Idempotency-Key-Ref"))
	require.EqualValues(t, 2, b.calls["echo"].Load())

	// The Location is accepted by the lookup.
	look := b.do(req{method: http.MethodGet, path: first.Header().Get("Location"), apiKey: acmeKey1})
	require.Equal(t, http.StatusOK, look.Code, look.Body.String())
	var rec map[string]any
	require.NoError(t, json.Unmarshal(look.Body.Bytes(), &rec))
	require.Equal(t, ref, rec["ref"])
	require.Equal(t, "succeeded", rec["status"])

	// An empty body is {}: it derives the same key as {}.
	empty := b.post("echo", "", "")
	require.Equal(t, http.StatusOK, empty.Code)
	braces := b.post("echo", "", " {} ")
	require.Equal(t, http.StatusOK, braces.Code)
	require.Equal(t, empty.Header().Get("Idempotency-Key-Ref"), braces.Header().Get("Idempotency-Key-Ref"))
	require.Equal(t, "true", braces.Header().Get("Idempotent-Replayed"))
}

// Bodies and keys of rejectedRequests: none of them may appear in an
// answer or a log line.
const (
	secretBody = `{"prompt":"PRIVATE-USER-TEXT"`
	badKey     = "bad key/PRIVATE"
)

// bigBody is over the 512-byte body limit TestRejectedRequestsChangeNothing sets.
var bigBody = `{"pad":"` + strings.Repeat("x", 600) + `"}`

// rejectedRequests are requests the API refuses before the guard, with
// the status, problem type slug and stop reason of the refusal. They seed
// FuzzRequestPath too.
var rejectedRequests = []struct {
	name   string
	r      req
	chunk  bool // send the body without a Content-Length
	status int
	slug   string
	reason string
}{
	{"no credentials", req{path: "/v1/ops/echo", body: `{}`}, false, 401, "unauthorized", "unknown"},
	{"wrong key", req{path: "/v1/ops/echo", body: `{}`, apiKey: "acme-key-one-0009"}, false, 401, "unauthorized", "unknown"},
	{"basic auth", req{path: "/v1/ops/echo", body: `{}`, headers: []string{"Authorization", "Basic YWNtZTprZXk="}},
		false, 401, "unauthorized", "unknown"},
	{"unknown scope", req{path: "/v1/ops/nope", body: `{}`, apiKey: acmeKey1}, false, 404, "unknown-scope", "unknown"},
	{"invalid scope", req{path: "/v1/ops/" + strings.Repeat("s", 300), body: `{}`, apiKey: acmeKey1}, false, 404, "unknown-scope", "unknown"},
	{"malformed key", req{path: "/v1/ops/echo", body: `{}`, apiKey: acmeKey1, headers: []string{"Idempotency-Key", badKey}}, false, 400, "invalid-idempotency-key", "invalid_input"},
	{"empty key", req{path: "/v1/ops/echo", body: `{}`, apiKey: acmeKey1, headers: []string{"Idempotency-Key", ""}}, false, 400, "invalid-idempotency-key", "invalid_input"},
	{"empty sf-string", req{path: "/v1/ops/echo", body: `{}`, apiKey: acmeKey1, headers: []string{"Idempotency-Key", `""`}}, false, 400, "invalid-idempotency-key", "invalid_input"},
	{"unterminated", req{path: "/v1/ops/echo", body: `{}`, apiKey: acmeKey1, headers: []string{"Idempotency-Key", `"abc`}}, false, 400, "invalid-idempotency-key", "invalid_input"},
	{"sf-string params", req{path: "/v1/ops/echo", body: `{}`, apiKey: acmeKey1, headers: []string{"Idempotency-Key", `"abc";x=1`}}, false, 400, "invalid-idempotency-key", "invalid_input"},
	{"escaped sf-string", req{path: "/v1/ops/echo", body: `{}`, apiKey: acmeKey1, headers: []string{"Idempotency-Key", `"a\"b"`}}, false, 400, "invalid-idempotency-key", "invalid_input"},
	{"key too long", req{path: "/v1/ops/echo", body: `{}`, apiKey: acmeKey1, headers: []string{"Idempotency-Key", strings.Repeat("k", 256)}}, false, 400, "invalid-idempotency-key", "invalid_input"},
	{"key list", req{path: "/v1/ops/echo", body: `{}`, apiKey: acmeKey1, headers: []string{"Idempotency-Key", "a, b"}}, false, 400, "invalid-idempotency-key", "invalid_input"},
	{"two keys", req{path: "/v1/ops/echo", body: `{}`, apiKey: acmeKey1, headers: []string{"Idempotency-Key", "a", "Idempotency-Key", "a"}},
		false, 400, "invalid-idempotency-key", "invalid_input"},
	{"missing required key", req{path: "/v1/ops/actionRequests.aiProposeCopy", body: `{}`, apiKey: acmeKey1}, false, 400, "missing-idempotency-key", "invalid_input"},
	{"malformed JSON", req{path: "/v1/ops/echo", body: secretBody, apiKey: acmeKey1, headers: []string{"Idempotency-Key", "k1"}}, false, 400, "invalid-body", "invalid_input"},
	{"trailing data", req{path: "/v1/ops/echo", body: `{} {"x":"PRIVATE"}`, apiKey: acmeKey1}, false, 400, "invalid-body", "invalid_input"},
	{"not JSON at all", req{path: "/v1/ops/echo", body: `PRIVATE=1&b=2`, apiKey: acmeKey1}, false, 400, "invalid-body", "invalid_input"},
	{"invalid UTF-8 string", req{path: "/v1/ops/echo", body: "{\"a\":\"\xff\"}", apiKey: acmeKey1}, false, 400, "invalid-body", "invalid_input"},
	{"too large", req{path: "/v1/ops/echo", body: bigBody, apiKey: acmeKey1, headers: []string{"Idempotency-Key", "k2"}}, false, 413, "body-too-large", "invalid_input"},
	{"too large, chunked", req{path: "/v1/ops/echo", body: bigBody, apiKey: acmeKey1}, true, 413, "body-too-large", "invalid_input"},
	// Auth comes first: an unknown scope without credentials is a 401.
	{"unknown scope, no credentials", req{path: "/v1/ops/nope", body: `{}`}, false, 401, "unauthorized", "unknown"},
	// The scope comes before the key: an unknown scope with a bad key is a 404.
	{"unknown scope, bad key", req{path: "/v1/ops/nope", body: `{}`, apiKey: acmeKey1, headers: []string{"Idempotency-Key", badKey}}, false, 404, "unknown-scope", "unknown"},
	// The key comes before the body.
	{"bad key, bad body", req{path: "/v1/ops/echo", body: secretBody, apiKey: acmeKey1, headers: []string{"Idempotency-Key", badKey}}, false, 400, "invalid-idempotency-key", "invalid_input"},
	{"missing key, body too large", req{path: "/v1/ops/actionRequests.aiProposeCopy", body: bigBody, apiKey: acmeKey1}, false, 400, "missing-idempotency-key", "invalid_input"},
}

// TestRejectedRequestsChangeNothing: every request refused before the guard
// answers with a problem, and neither stores a row nor runs an operation.
func TestRejectedRequestsChangeNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range rejectedRequests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{options: func(o *Options) { o.MaxBodyBytes = 512 }})
			hr := httptest.NewRequest(http.MethodPost, tc.r.path, strings.NewReader(tc.r.body))
			if tc.chunk {
				hr.Body = io.NopCloser(strings.NewReader(tc.r.body)) // hide the length
				hr.ContentLength = -1
			}
			if tc.r.apiKey != "" {
				hr.Header.Set("Authorization", "Bearer "+tc.r.apiKey)
			}
			for i := 0; i+1 < len(tc.r.headers); i += 2 {
				hr.Header.Add(tc.r.headers[i], tc.r.headers[i+1])
			}
			w := httptest.NewRecorder()
			b.handler.ServeHTTP(w, hr)

			require.Equal(t, tc.status, w.Code, w.Body.String())
			p := problemOf(t, w)
			require.Equal(t, ProblemTypePrefix+tc.slug, p["type"])
			require.Equal(t, tc.reason, p["stopReason"])
			require.NotContains(t, w.Body.String(), "PRIVATE", "the detail echoes the key or body")
			if tc.r.apiKey != "" {
				require.NotContains(t, w.Body.String(), tc.r.apiKey)
			}
			if tc.status == http.StatusUnauthorized {
				require.True(t, strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer "), w.Header().Get("WWW-Authenticate"))
			} else {
				require.Empty(t, w.Header().Get("WWW-Authenticate"))
			}
			require.Empty(t, w.Header().Get("Location"), "no key reference before the guard answered")
			require.Empty(t, w.Header().Get("Retry-After"))

			require.Empty(t, b.store.Rows(), "a rejected request stored a row")
			require.Zero(t, b.totalCalls(), "a rejected request ran an operation")
			require.NotContains(t, b.logs.String(), "PRIVATE")
			require.NotContains(t, b.logs.String(), acmeKey1)
		})
	}
}

func TestFingerprintMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Equal(t, http.StatusOK, b.post("echo", "k-1", `{"n":1}`).Code)

	w := b.post("echo", "k-1", `{"n":2,"secret":"PRIVATE"}`)
	require.Equal(t, http.StatusUnprocessableEntity, w.Code)
	p := problemOf(t, w)
	require.Equal(t, ProblemTypePrefix+"idempotency-key-reused", p["type"])
	require.Equal(t, "invalid_input", p["stopReason"])
	require.NotContains(t, w.Body.String(), "PRIVATE")
	require.Equal(t, "/v1/ops/echo/keys/k-1", w.Header().Get("Location"))
	require.EqualValues(t, 1, b.calls["echo"].Load())
	require.Len(t, b.store.Rows(), 1)

	// The original is still replayed.
	again := b.post("echo", "k-1", `{"n":1}`)
	require.Equal(t, http.StatusOK, again.Code)
	require.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
}

func TestInProgressThenWait(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{options: func(o *Options) { o.RetryAfter = 1500 * time.Millisecond }})

	var wg sync.WaitGroup
	defer wg.Wait()
	defer b.releaseNow() // runs first: never leave the slow operation blocked
	var first, waiter *httptest.ResponseRecorder
	wg.Add(1)
	go func() { defer wg.Done(); first = b.post("slow", "s-1", `{"n":3}`) }()
	<-b.started

	// A duplicate while the first runs: 409 with Retry-After.
	busy := b.post("slow", "s-1", `{"n":3}`)
	require.Equal(t, http.StatusConflict, busy.Code)
	p := problemOf(t, busy)
	require.Equal(t, "in_progress", p["stopReason"])
	require.Equal(t, ProblemTypePrefix+"in-progress", p["type"])
	require.Equal(t, false, p["cached"])
	require.Equal(t, "2", busy.Header().Get("Retry-After"), "1.5s rounds up")
	require.Equal(t, "/v1/ops/slow/keys/s-1", busy.Header().Get("Location"))
	require.Empty(t, busy.Header().Get("Preference-Applied"))

	// The lookup shows it started, without a response.
	look := b.do(req{method: http.MethodGet, path: "/v1/ops/slow/keys/s-1", apiKey: acmeKey2})
	require.Equal(t, http.StatusOK, look.Code)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(look.Body.Bytes(), &rec))
	require.Equal(t, "started", rec["status"])
	require.NotContains(t, rec, "response")
	require.NotContains(t, rec, "completedAt")

	// With Prefer: wait=5 the duplicate waits for the first call's result.
	// It has polled once it read the row twice: the first read and a re-read.
	reads := b.gets.Load()
	wg.Add(1)
	go func() {
		defer wg.Done()
		waiter = b.post("slow", "s-1", `{"n":3}`, "Prefer", "respond-async, wait=5")
	}()
	require.Eventually(t, func() bool { return b.gets.Load() >= reads+2 }, 5*time.Second, time.Millisecond, "the waiter never polled")
	b.releaseNow()
	wg.Wait()

	require.Equal(t, http.StatusOK, first.Code, first.Body.String())
	require.Equal(t, http.StatusOK, waiter.Code, waiter.Body.String())
	require.Equal(t, "wait=5", waiter.Header().Get("Preference-Applied"))
	require.Equal(t, "true", waiter.Header().Get("Idempotent-Replayed"))
	require.Equal(t, first.Body.String(), string(asFresh(waiter.Body.Bytes())))
	require.EqualValues(t, 1, b.calls["slow"].Load())
}

func TestPreferWaitIsCapped(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{options: func(o *Options) { o.MaxWait = 2 * time.Second }})
	w := b.post("echo", "w-1", `{}`, "Prefer", "wait=100")
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "wait=2", w.Header().Get("Preference-Applied"))

	// An invalid wait is ignored, not an error.
	w = b.post("echo", "w-2", `{}`, "Prefer", "wait=soon")
	require.Equal(t, http.StatusOK, w.Code)
	require.Empty(t, w.Header().Get("Preference-Applied"))
}

func TestOperationFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// A failed run is a 502 problem, not stored as a success: the retry runs
	// the operation again and succeeds.
	failed := b.post("flaky", "f-1", `{"n":1}`)
	require.Equal(t, http.StatusBadGateway, failed.Code)
	p := problemOf(t, failed)
	require.Equal(t, "provider_error", p["stopReason"])
	require.Equal(t, ProblemTypePrefix+"operation-failed", p["type"])
	require.Equal(t, false, p["cached"])
	require.Empty(t, failed.Header().Get("Idempotent-Replayed"))
	require.Equal(t, "/v1/ops/flaky/keys/f-1", failed.Header().Get("Location"))
	require.NotContains(t, failed.Body.String(), "secret-upstream-detail")

	ok := b.post("flaky", "f-1", `{"n":1}`)
	require.Equal(t, http.StatusOK, ok.Code, ok.Body.String())
	require.Empty(t, ok.Header().Get("Idempotent-Replayed"))
	require.EqualValues(t, 2, b.calls["flaky"].Load())

	// broken allows 2 attempts: after them, the stored failure with
	// stopReason retry_limit, replayed byte for byte.
	for range 2 {
		w := b.post("broken", "b-1", `{}`)
		require.Equal(t, http.StatusBadGateway, w.Code)
		require.Equal(t, "provider_error", problemOf(t, w)["stopReason"])
	}
	limit := b.post("broken", "b-1", `{}`)
	require.Equal(t, http.StatusBadGateway, limit.Code)
	p = problemOf(t, limit)
	require.Equal(t, "retry_limit", p["stopReason"])
	require.Equal(t, true, p["cached"])
	require.Equal(t, "true", limit.Header().Get("Idempotent-Replayed"))
	require.NotEmpty(t, limit.Header().Get("Idempotent-Completed-At"))
	again := b.post("broken", "b-1", `{}`)
	require.Equal(t, limit.Body.String(), again.Body.String())
	require.EqualValues(t, 2, b.calls["broken"].Load())
	require.NotContains(t, b.logs.String(), "secret-upstream-detail")

	// A timeout is a 502 with stopReason timeout.
	w := b.post("timeout", "t-1", `{}`)
	require.Equal(t, http.StatusBadGateway, w.Code)
	require.Equal(t, "timeout", problemOf(t, w)["stopReason"])
}

// TestFailureProblemIsDeterministic: a failure answer depends only on the
// status, the stopReason and cached, so a replayed failure equals the first
// one except for "cached".
func TestFailureProblemIsDeterministic(t *testing.T) {
	t.Parallel()
	for _, reason := range []string{"provider_error", "timeout", "rate_limited", "retry_limit", "abandoned", "unknown", "not-a-reason"} {
		fresh := idemguard.Result{Status: idemguard.StatusFailed, StatusCode: 502, StopReason: "x", Attempt: 1, KeyHash: "aa"}
		fresh.StopReason = sanitize.StopReason(reason)
		replay := fresh
		replay.Cached, replay.Attempt, replay.KeyHash, replay.CompletedAt = true, 3, "bb", time.Now()
		a, b := pipeline.EncodeJSON(pipeline.ResultProblem(fresh)), pipeline.EncodeJSON(pipeline.ResultProblem(replay))
		require.Equal(t, string(a), string(asFresh(b)), reason)
		require.Contains(t, string(b), `"cached":true`)
		if reason == "not-a-reason" {
			require.Contains(t, string(a), `"stopReason":"unknown"`)
		}
	}
	// A stored code outside 4xx/5xx never turns a failure into a success.
	p := pipeline.ResultProblem(idemguard.Result{Status: idemguard.StatusFailed, StatusCode: 200, StopReason: "timeout"})
	require.Equal(t, http.StatusBadGateway, p.Status)
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	acme := b.post("echo", "shared-key", `{"n":1}`)
	require.Equal(t, http.StatusOK, acme.Code)
	derived := b.post("echo", "", `{"n":9}`)
	require.Equal(t, http.StatusOK, derived.Code)

	// beta cannot read acme's keys: 404, the same as an absent key.
	absent := b.do(req{method: http.MethodGet, path: "/v1/ops/echo/keys/never-used", apiKey: betaKey})
	require.Equal(t, http.StatusNotFound, absent.Code)
	for _, path := range []string{"/v1/ops/echo/keys/shared-key", derived.Header().Get("Location")} {
		w := b.do(req{method: http.MethodGet, path: path, apiKey: betaKey})
		require.Equal(t, http.StatusNotFound, w.Code, path)
		p := problemOf(t, w)
		require.Equal(t, ProblemTypePrefix+"key-not-found", p["type"])
		require.Equal(t, absent.Body.String(), w.Body.String(), "another tenant's key must look absent")
	}

	// beta's POST with the same key and body is an independent operation.
	w := b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: `{"n":1}`, apiKey: betaKey, headers: []string{"Idempotency-Key", "shared-key"}})
	require.Equal(t, http.StatusOK, w.Code)
	require.Empty(t, w.Header().Get("Idempotent-Replayed"))
	require.Contains(t, w.Body.String(), `"cached":false`)
	require.EqualValues(t, 3, b.calls["echo"].Load())
	// ... and a different body is not a mismatch across tenants.
	w = b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: `{"n":2}`, apiKey: betaKey, headers: []string{"Idempotency-Key", "other"}})
	require.Equal(t, http.StatusOK, w.Code)

	// Both tenants now read their own record; acme with either of its keys.
	for _, key := range []string{acmeKey1, acmeKey2, betaKey} {
		w := b.do(req{method: http.MethodGet, path: "/v1/ops/echo/keys/shared-key", apiKey: key})
		require.Equal(t, http.StatusOK, w.Code, key)
	}
	require.Len(t, b.store.Rows(), 4)
	tenants := map[string]int{}
	for _, r := range b.store.Rows() {
		tenants[r.Tenant]++
	}
	require.Equal(t, map[string]int{"acme": 2, "beta": 2}, tenants)
}

// lookedUpKey is the key record GET …/keys/{key} answers, its times parsed.
type lookedUpKey struct {
	Ref          string          `json:"ref"`
	Scope        string          `json:"scope"`
	Status       string          `json:"status"`
	AttemptCount int             `json:"attemptCount"`
	CreatedAt    time.Time       `json:"createdAt"`
	StartedAt    time.Time       `json:"startedAt"`
	HeartbeatAt  time.Time       `json:"heartbeatAt"`
	CompletedAt  time.Time       `json:"completedAt"`
	ExpiresAt    time.Time       `json:"expiresAt"`
	Response     json.RawMessage `json:"response"`
	ResponseCode int             `json:"responseCode"`
}

// problemCase is a GET of path with apiKey that answers status with the
// problem type ProblemTypePrefix+slug.
type problemCase struct {
	path, apiKey string
	status       int
	slug         string
}

// requireProblems sends each case's GET and checks its status and problem type.
func (b *testBundle) requireProblems(t *testing.T, cases map[string]problemCase) {
	t.Helper()
	for name, tc := range cases {
		w := b.do(req{method: http.MethodGet, path: tc.path, apiKey: tc.apiKey})
		require.Equal(t, tc.status, w.Code, name)
		require.Equal(t, ProblemTypePrefix+tc.slug, problemOf(t, w)["type"], name)
	}
}

func TestLookupKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.post("created", "look-1", `{"a":1}`)
	require.Equal(t, http.StatusCreated, first.Code)

	w := b.do(req{method: http.MethodGet, path: "/v1/ops/created/keys/look-1", apiKey: acmeKey1})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, "application/json", w.Header().Get("Content-Type"))
	var rec lookedUpKey
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &rec))
	require.Equal(t, "look-1", rec.Ref)
	require.Equal(t, "created", rec.Scope)
	require.Equal(t, "succeeded", rec.Status)
	require.Equal(t, 1, rec.AttemptCount)
	require.Equal(t, http.StatusCreated, rec.ResponseCode)
	require.Equal(t, first.Body.String(), string(rec.Response), "the stored envelope is what the first caller got")
	for name, ts := range map[string]time.Time{"created": rec.CreatedAt, "started": rec.StartedAt, "completed": rec.CompletedAt} {
		require.WithinDuration(t, time.Now(), ts, time.Minute, name)
		require.Equal(t, time.UTC, ts.Location(), name)
	}
	require.WithinDuration(t, rec.CompletedAt.Add(idemguard.DefaultTTL), rec.ExpiresAt, time.Second)
	require.Regexp(t, regexp.MustCompile(`"createdAt":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"`), w.Body.String())

	// The same record by key hash.
	var hash string
	for _, r := range b.store.Rows() {
		hash = r.KeyHash
	}
	byHash := b.do(req{method: http.MethodGet, path: "/v1/ops/created/keys/~" + hash, apiKey: acmeKey1})
	require.Equal(t, http.StatusOK, byHash.Code)
	require.Equal(t, strings.Replace(w.Body.String(), `"ref":"look-1"`, `"ref":"~`+hash+`"`, 1), byHash.Body.String())

	b.requireProblems(t, map[string]problemCase{
		"other scope":        {"/v1/ops/echo/keys/look-1", acmeKey1, 404, "key-not-found"},
		"unknown scope":      {"/v1/ops/nope/keys/look-1", acmeKey1, 404, "unknown-scope"},
		"bad client key":     {"/v1/ops/created/keys/a%20b", acmeKey1, 400, "invalid-key-reference"},
		"short hash":         {"/v1/ops/created/keys/~abc", acmeKey1, 400, "invalid-key-reference"},
		"upper-case hash":    {"/v1/ops/created/keys/~" + strings.ToUpper(hash), acmeKey1, 400, "invalid-key-reference"},
		"tilde only":         {"/v1/ops/created/keys/~", acmeKey1, 400, "invalid-key-reference"},
		"unknown hash":       {"/v1/ops/created/keys/~" + strings.Repeat("0", 64), acmeKey1, 404, "key-not-found"},
		"trailing slash":     {"/v1/ops/created/keys/look-1/", acmeKey1, 404, "unknown-route"},
		"no key":             {"/v1/ops/created/keys/", acmeKey1, 404, "unknown-route"},
		"derived key absent": {"/v1/ops/created/keys/~" + strings.Repeat("f", 64), acmeKey1, 404, "key-not-found"},
	})
	// Without credentials: 401 before anything else.
	w = b.do(req{method: http.MethodGet, path: "/v1/ops/nope/keys/look-1"})
	require.Equal(t, http.StatusUnauthorized, w.Code)
}

func TestStoreDown(t *testing.T) {
	t.Parallel()
	notReady := errors.New("ping: dial tcp 10.0.0.1:3306: connection refused")
	var ready error
	var mu sync.Mutex
	b := setup(t, setupOpts{options: func(o *Options) {
		o.Ready = func(ctx context.Context) error {
			_, hasDeadline := ctx.Deadline()
			require.True(t, hasDeadline, "Ready must get a bounded context")
			mu.Lock()
			defer mu.Unlock()
			return ready
		}
	}})
	require.Equal(t, http.StatusOK, b.do(req{method: http.MethodGet, path: "/readyz"}).Code)

	require.NoError(t, b.store.Close())
	mu.Lock()
	ready = notReady
	mu.Unlock()

	w := b.do(req{method: http.MethodGet, path: "/readyz"})
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	p := problemOf(t, w)
	require.Equal(t, ProblemTypePrefix+"not-ready", p["type"])
	require.Equal(t, "5", w.Header().Get("Retry-After"))
	require.NotContains(t, w.Body.String(), "10.0.0.1", "the cause is logged, not answered")

	w = b.post("echo", "d-1", `{}`)
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	p = problemOf(t, w)
	require.Equal(t, ProblemTypePrefix+"store-unavailable", p["type"])
	require.Equal(t, "unknown", p["stopReason"])
	require.Equal(t, "5", w.Header().Get("Retry-After"))
	require.Equal(t, "/v1/ops/echo/keys/d-1", w.Header().Get("Location"))
	require.Zero(t, b.totalCalls(), "the operation ran with the store down")

	w = b.post("echo", "", `{}`) // derived key: no reference to give
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Empty(t, w.Header().Get("Location"))

	w = b.do(req{method: http.MethodGet, path: "/v1/ops/echo/keys/d-1", apiKey: acmeKey1})
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.Equal(t, "5", w.Header().Get("Retry-After"))
	require.Zero(t, b.totalCalls())

	// The cause of not-ready is in the log.
	found := false
	for _, l := range b.logs.Lines(t, "http: not ready") {
		found = found || strings.Contains(fmt.Sprint(l["err"]), "connection refused")
	}
	require.True(t, found)
}

func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.do(req{method: http.MethodGet, path: "/healthz"})
	require.Equal(t, http.StatusOK, w.Code)
	require.JSONEq(t, `{"status":"ok"}`, w.Body.String())
	w = b.do(req{method: http.MethodGet, path: "/readyz"})
	require.Equal(t, http.StatusOK, w.Code, "nil Ready means ready")
	require.JSONEq(t, `{"status":"ok"}`, w.Body.String())

	w = b.do(req{method: http.MethodGet, path: "/metrics"})
	require.Equal(t, http.StatusNotFound, w.Code)
	problemOf(t, w)

	m := setup(t, setupOpts{options: func(o *Options) {
		o.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = io.WriteString(w, "idemguard_up 1\n")
		})
		o.CORSOrigins = []string{"https://app.example.com"}
	}})
	w = m.do(req{method: http.MethodGet, path: "/metrics", headers: []string{"Origin", "https://app.example.com"}})
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "idemguard_up 1\n", w.Body.String())
	require.Empty(t, w.Header().Get("Access-Control-Allow-Origin"), "a page of an allowed origin cannot read /metrics")
	w = m.do(req{method: http.MethodGet, path: "/healthz", headers: []string{"Origin", "https://app.example.com"}})
	require.Equal(t, "https://app.example.com", w.Header().Get("Access-Control-Allow-Origin"), "CORS itself is on")
}

func TestUnknownRouteAndMethod(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.do(req{method: http.MethodGet, path: "/nope"})
	require.Equal(t, http.StatusNotFound, w.Code)
	require.Equal(t, ProblemTypePrefix+"unknown-route", problemOf(t, w)["type"])

	w = b.do(req{method: http.MethodPut, path: "/v1/ops/echo", body: `{}`, apiKey: acmeKey1})
	require.Equal(t, http.StatusMethodNotAllowed, w.Code)
	require.Equal(t, "POST", w.Header().Get("Allow"))
	problemOf(t, w)

	w = b.do(req{method: http.MethodPost, path: "/v1/ops/echo/", body: `{}`, apiKey: acmeKey1})
	require.Equal(t, http.StatusNotFound, w.Code, "no redirect on a trailing slash")
	require.Empty(t, b.store.Rows())
}

func TestPanicRecovery(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{options: func(o *Options) {
		o.Metrics = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("PRIVATE panic value") })
	}})
	w := b.do(req{method: http.MethodGet, path: "/metrics"})
	require.Equal(t, http.StatusInternalServerError, w.Code)
	require.Equal(t, "unknown", problemOf(t, w)["stopReason"])
	require.NotContains(t, w.Body.String(), "PRIVATE")
	lines := b.logs.Lines(t, "http: handler panicked")
	require.Len(t, lines, 1)
	require.Equal(t, "string", lines[0]["panic_type"])
	require.NotContains(t, b.logs.String(), "PRIVATE panic value")
	// The request log still records the 500.
	var statuses []float64
	for _, l := range b.logs.Lines(t, "http: request") {
		statuses = append(statuses, l["status"].(float64))
	}
	require.Equal(t, []float64{500}, statuses)
}

func TestCORS(t *testing.T) {
	t.Parallel()
	const origin = "https://app.example.com"
	b := setup(t, setupOpts{options: func(o *Options) { o.CORSOrigins = []string{origin} }})

	preflight := func(b *testBundle, origin string) *httptest.ResponseRecorder {
		return b.do(req{method: http.MethodOptions, path: "/v1/ops/echo", headers: []string{
			"Origin", origin, "Access-Control-Request-Method", "POST",
			"Access-Control-Request-Headers", "authorization, content-type, idempotency-key, prefer",
		}})
	}
	w := preflight(b, origin)
	require.Equal(t, http.StatusNoContent, w.Code)
	require.Equal(t, origin, w.Header().Get("Access-Control-Allow-Origin"))
	methods := strings.ToUpper(w.Header().Get("Access-Control-Allow-Methods"))
	for _, m := range []string{"GET", "POST", "OPTIONS"} {
		require.Contains(t, methods, m)
	}
	allowed := strings.ToLower(w.Header().Get("Access-Control-Allow-Headers"))
	for _, h := range []string{"authorization", "content-type", "idempotency-key", "prefer"} {
		require.Contains(t, allowed, h)
	}
	require.Empty(t, w.Header().Get("Access-Control-Allow-Credentials"))
	require.Empty(t, b.store.Rows())

	// An actual request exposes the custom headers, on success and on error.
	for _, r := range []req{
		{method: http.MethodPost, path: "/v1/ops/echo", body: `{}`, apiKey: acmeKey1, headers: []string{"Origin", origin, "Idempotency-Key", "cors-1"}},
		{method: http.MethodPost, path: "/v1/ops/echo", body: `{}`, headers: []string{"Origin", origin}},
	} {
		w = b.do(r)
		require.Equal(t, origin, w.Header().Get("Access-Control-Allow-Origin"), w.Code)
		exposed := strings.ToLower(w.Header().Get("Access-Control-Expose-Headers"))
		for _, h := range []string{"Idempotent-Replayed", "Idempotent-Completed-At", "Idempotency-Key-Ref", "Location", "Retry-After", "Preference-Applied"} {
			require.Contains(t, exposed, strings.ToLower(h))
		}
	}

	// Another origin gets no CORS headers (the browser blocks it), but a
	// server-side client sending Origin is still served.
	w = preflight(b, "https://evil.example")
	require.Empty(t, w.Header().Get("Access-Control-Allow-Origin"))
	require.Equal(t, http.StatusMethodNotAllowed, w.Code)
	w = b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: `{}`, apiKey: acmeKey1, headers: []string{"Origin", "https://evil.example"}})
	require.Equal(t, http.StatusOK, w.Code)
	require.Empty(t, w.Header().Get("Access-Control-Allow-Origin"))

	// Without configured origins there are no CORS headers at all.
	plain := setup(t)
	w = preflight(plain, origin)
	require.Empty(t, w.Header().Get("Access-Control-Allow-Origin"))
}

// serve's handler (reqlog.JSONHandler) writes the request lines itself:
// the same bytes as slog's JSON handler, but for the time and the duration.
func TestRequestLogThroughServesHandler(t *testing.T) {
	t.Parallel()
	requests := func(b *testBundle) {
		b.post("echo", "log-1", `{"text":"x"}`)
		b.post("echo", "log-1", `{"text":"x"}`)
		b.do(req{method: http.MethodGet, path: "/v1/ops/echo/keys/log-1", apiKey: acmeKey1})
		b.do(req{method: http.MethodPost, path: "/v1/ops/echo", apiKey: "wrong-key"})
		b.do(req{method: http.MethodGet, path: "/nope"})
		b.do(req{method: http.MethodGet, path: "/healthz"}) // below Info: in neither
	}
	var plain, own testlog.Buffer
	requests(setup(t, setupOpts{options: func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&plain, nil)) }}))
	requests(setup(t, setupOpts{options: func(o *Options) { o.Logger = slog.New(reqlog.NewJSONHandler(&own)) }}))
	varying := regexp.MustCompile(`"time":"[^"]+"|"duration_ms":[0-9.e-]+`)
	lines := func(b *testlog.Buffer) []string {
		var out []string
		for _, l := range strings.SplitAfter(b.String(), "\n") {
			if strings.Contains(l, `"msg":"http: request"`) {
				out = append(out, varying.ReplaceAllString(l, "…"))
			}
		}
		return out
	}
	require.Len(t, lines(&plain), 5)
	require.Equal(t, lines(&plain), lines(&own))
}

func TestRequestLog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "PRIVATE-client-key"
	require.Equal(t, http.StatusOK, b.post("echo", key, `{"text":"PRIVATE user text"}`).Code)
	require.Equal(t, http.StatusOK, b.post("echo", key, `{"text":"PRIVATE user text"}`).Code)
	require.Equal(t, http.StatusOK, b.do(req{method: http.MethodGet, path: "/v1/ops/echo/keys/" + key, apiKey: acmeKey1}).Code)
	require.Equal(t, http.StatusUnauthorized, b.do(req{method: http.MethodPost, path: "/v1/ops/echo", apiKey: "PRIVATE-api-key"}).Code)
	require.Equal(t, http.StatusOK, b.do(req{method: http.MethodGet, path: "/healthz"}).Code)

	logs := b.logs.String()
	for _, secret := range []string{"PRIVATE", acmeKey1, "Bearer"} {
		require.NotContains(t, logs, secret)
	}
	lines := b.logs.Lines(t, "http: request")
	require.Len(t, lines, 5)

	var hash string
	for _, r := range b.store.Rows() {
		hash = r.KeyHash
	}
	fresh, replay, lookup, unauth, health := lines[0], lines[1], lines[2], lines[3], lines[4]
	for _, l := range []map[string]any{fresh, replay} {
		require.Equal(t, "POST", l["method"])
		require.Equal(t, "/v1/ops/:scope", l["route"])
		require.EqualValues(t, 200, l["status"])
		require.Equal(t, "acme", l["tenant"])
		require.Equal(t, "echo", l["scope"])
		require.Equal(t, shortHash(hash), l["key_hash"])
		require.Equal(t, "completed", l["stop_reason"])
		require.GreaterOrEqual(t, l["duration_ms"].(float64), 0.0)
		require.Equal(t, "INFO", l["level"])
	}
	require.Nil(t, fresh["replayed"])
	require.Equal(t, true, replay["replayed"])
	require.Equal(t, "/v1/ops/:scope/keys/:key", lookup["route"])
	require.Equal(t, shortHash(hash), lookup["key_hash"])
	require.EqualValues(t, 401, unauth["status"])
	require.Nil(t, unauth["tenant"])
	require.Nil(t, unauth["scope"], "the scope is logged only once it is known")
	require.Equal(t, "DEBUG", health["level"])
}

func TestClientGoneStillStoresResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *httptest.ResponseRecorder)
	go func() {
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/ops/slow", strings.NewReader(`{"n":1}`))
		r.Header.Set("Authorization", "Bearer "+acmeKey1)
		r.Header.Set("Idempotency-Key", "gone-1")
		w := httptest.NewRecorder()
		b.handler.ServeHTTP(w, r)
		done <- w
	}()
	<-b.started
	cancel() // the client hangs up; the operation is detached and goes on
	b.releaseNow()
	<-done
	w := b.post("slow", "gone-1", `{"n":1}`)
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "true", w.Header().Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, b.calls["slow"].Load())
}

// TestLoggerDefault: a nil Logger uses slog.Default without failing.
func TestLoggerDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	auth, err := auth.NewAuthenticator(nil)
	require.NoError(t, err)
	h, err := New(Options{Guard: b.guard, Auth: auth})
	require.NoError(t, err)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusOK, w.Code)
}

// TestOverRealServer drives the handler through net/http: real header
// parsing, a declared Content-Length over the limit, keep-alive.
func TestOverRealServer(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{options: func(o *Options) { o.MaxBodyBytes = 1024 }})
	srv := httptest.NewServer(b.handler)
	defer srv.Close()
	client := srv.Client()

	send := func(body string, headers ...string) (*http.Response, string) {
		t.Helper()
		r, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/ops/echo", strings.NewReader(body))
		require.NoError(t, err)
		r.Header.Set("Authorization", "Bearer "+acmeKey1)
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Add(headers[i], headers[i+1])
		}
		resp, err := client.Do(r)
		require.NoError(t, err)
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(got)
	}

	resp, first := send(`{"n":1}`, "Idempotency-Key", "real-1")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, again := send(`{"n":1}`, "Idempotency-Key", "real-1")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
	require.Equal(t, first, string(asFresh([]byte(again))))

	resp, _ = send(`{"n":1}`, "Idempotency-Key", "real-2", "Idempotency-Key", "real-3")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = send(`{"pad":"`+strings.Repeat("x", 2000)+`"}`, "Idempotency-Key", "real-4")
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))

	require.Len(t, b.store.Rows(), 1)
	require.EqualValues(t, 1, b.calls["echo"].Load())
	client.CloseIdleConnections()
}

// Every answer of an operation reaches the client with a Content-Length,
// never chunked, first and replayed: a short body's counted by net/http
// (Answers.Result declares only a long one's), a long one's declared.
func TestAnswersCarryTheirLength(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("y", 5000)
	b := setup(t, setupOpts{options: func(o *Options) {
		o.Scopes = append(o.Scopes, Scope{Name: "long", Run: func(context.Context, json.RawMessage) (any, error) {
			return map[string]any{"ok": true, "data": map[string]any{"text": long}}, nil
		}})
	}})
	srv := httptest.NewServer(b.handler)
	defer srv.Close()
	for _, scope := range []string{"echo", "long"} {
		for i := range 2 {
			r, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/ops/"+scope, strings.NewReader(`{"n":1}`))
			require.NoError(t, err)
			r.Header.Set("Authorization", "Bearer "+acmeKey1)
			r.Header.Set("Idempotency-Key", "len-1")
			resp, err := srv.Client().Do(r)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, i == 1, resp.Header.Get("Idempotent-Replayed") == "true")
			require.Empty(t, resp.TransferEncoding, "%s: chunked", scope)
			require.EqualValues(t, len(body), resp.ContentLength, scope)
			require.Equal(t, scope == "long", len(body) > 2048)
		}
	}
}
