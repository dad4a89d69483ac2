package routers

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

// allowResets lets the named scopes reset and force.
func allowResets(names ...string) setupOpts {
	return setupOpts{options: func(o *Options) {
		for i := range o.Scopes {
			for _, n := range names {
				if o.Scopes[i].Name == n {
					o.Scopes[i].Settings.AllowReset = true
				}
			}
		}
	}}
}

// DELETE …/keys/{key} resets a finished key: the next request runs afresh;
// each refusal has its documented answer and changes nothing.
func TestResetKey(t *testing.T) {
	t.Parallel()
	b := setup(t, allowResets("echo", "slow"))
	del := func(path, apiKey string) (int, map[string]any) {
		w := b.do(req{method: http.MethodDelete, path: path, apiKey: apiKey})
		var body map[string]any
		_ = json.Unmarshal(w.Body.Bytes(), &body)
		return w.Code, body
	}
	require.Equal(t, http.StatusOK, b.post("echo", "k1", `{"n":1}`).Code)
	require.Equal(t, http.StatusCreated, b.post("created", "k1", `{"n":1}`).Code)

	code, body := del("/v1/ops/echo/keys/k1", betaKey)
	require.Equal(t, http.StatusNotFound, code, "another tenant's key")
	code, body = del("/v1/ops/created/keys/k1", acmeKey1)
	require.Equal(t, http.StatusForbidden, code, body)
	require.Equal(t, ProblemTypePrefix+"reset-forbidden", body["type"])
	code, _ = del("/v1/ops/echo/keys/absent", acmeKey1)
	require.Equal(t, http.StatusNotFound, code)
	replay := b.post("created", "k1", `{"n":1}`)
	require.Equal(t, "true", replay.Header().Get(pipeline.HeaderReplayed), "a refused reset changes nothing")

	code, body = del("/v1/ops/echo/keys/k1", acmeKey1)
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "reset", body["status"])
	require.EqualValues(t, 1, body["attemptCount"])
	lookup := b.do(req{method: http.MethodGet, path: "/v1/ops/echo/keys/k1", apiKey: acmeKey1})
	require.Equal(t, http.StatusNotFound, lookup.Code)
	again := b.post("echo", "k1", `{"n":1}`)
	require.Equal(t, http.StatusOK, again.Code)
	require.Empty(t, again.Header().Get(pipeline.HeaderReplayed))
	require.EqualValues(t, 2, b.calls["echo"].Load())

	go func() { _ = b.post("slow", "run", `{"n":1}`) }()
	<-b.started
	code, body = del("/v1/ops/slow/keys/run", acmeKey1)
	require.Equal(t, http.StatusConflict, code, body)
	require.Equal(t, ProblemTypePrefix+"key-running", body["type"])
	forced := b.post("slow", "run", `{"n":1}`, pipeline.HeaderForceNew, "true")
	require.Equal(t, http.StatusConflict, forced.Code, "a forced request on a running key")
	b.releaseNow()
}

// Idempotency-Force-New: true runs a finished key again and says which
// attempt it replaced; replays carry the new answer; a bad value is a 400.
func TestForceNewHeader(t *testing.T) {
	t.Parallel()
	b := setup(t, allowResets("echo"))
	require.Equal(t, http.StatusOK, b.post("echo", "k", `{"n":1}`).Code)
	storedBefore(b)
	forced := b.post("echo", "k", `{"n":1}`, pipeline.HeaderForceNew, "true")
	require.Equal(t, http.StatusOK, forced.Code, forced.Body.String())
	require.Equal(t, "1", forced.Header().Get(pipeline.HeaderReplacesAttempt))
	require.Empty(t, forced.Header().Get(pipeline.HeaderReplayed))
	require.EqualValues(t, 2, b.calls["echo"].Load())
	replay := b.post("echo", "k", `{"n":1}`)
	require.Equal(t, "true", replay.Header().Get(pipeline.HeaderReplayed))
	require.Empty(t, replay.Header().Get(pipeline.HeaderReplacesAttempt))

	bad := b.post("echo", "k", `{"n":1}`, pipeline.HeaderForceNew, "yes")
	require.Equal(t, http.StatusBadRequest, bad.Code)
	refused := b.post("created", "k", `{"n":1}`, pipeline.HeaderForceNew, "true")
	require.Equal(t, http.StatusForbidden, refused.Code)
	require.Zero(t, b.calls["created"].Load(), "a forbidden forced request runs nothing")
	require.EqualValues(t, 2, b.calls["echo"].Load())
}

// storedBefore waits until every stored answer of b's store is over a millisecond old: a
// forced request replaces only an answer stored before it began.
func storedBefore(b *testBundle) {
	for _, r := range b.store.Rows() {
		for time.Since(r.CompletedAt) <= time.Millisecond {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// A forced background run (Prefer: respond-async) says in its 202 which attempt it replaced.
func TestForceNewInTheBackground(t *testing.T) {
	t.Parallel()
	b := setup(t, allowResets("echo"))
	require.Equal(t, http.StatusOK, b.post("echo", "k", `{"n":1}`).Code)
	storedBefore(b)
	w := b.post("echo", "k", `{"n":1}`, pipeline.HeaderForceNew, "true", "Prefer", "respond-async")
	require.Contains(t, []int{http.StatusAccepted, http.StatusOK}, w.Code, w.Body.String())
	require.Equal(t, "1", w.Header().Get(pipeline.HeaderReplacesAttempt))
}
