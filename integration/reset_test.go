package integration

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Reset and forced runs over three replicas of serve on one database, each with its replay
// cache on: once a reset or a forced answer has come back, no replica serves the old answer,
// not from its memory and not from a read that raced the change.

var forceNew = [2]string{"Idempotency-Force-New", "true"}

// numberedLLM answers call n with the content "answer-<n>-end", so every answer names the
// execution it came from.
func numberedLLM(t *testing.T) *fakeLLM {
	llm := newFakeLLM(t)
	llm.set(func(n int32, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-%d","object":"chat.completion","model":%q,
"choices":[{"index":0,"message":{"role":"assistant","content":"answer-%d-end"},"finish_reason":"stop"}],
"usage":{"prompt_tokens":21,"completion_tokens":6,"total_tokens":27}}`, n, model, n)
	})
	return llm
}

// executionOf is the execution an answer came from (0: not an answer of the operation).
func executionOf(a answer) int {
	for n := 1; n < 100; n++ {
		if bytes.Contains(a.body, []byte(fmt.Sprintf("answer-%d-end", n))) {
			return n
		}
	}
	return 0
}

// spread sends n requests for key over the replicas from 8 clients at once and returns how
// many answers came from each execution (0: a 409 while the new execution ran).
func spread(t *testing.T, c *http.Client, reps []*service, key string, n int) map[int]int {
	t.Helper()
	var mu sync.Mutex
	runs := map[int]int{}
	var next atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				a, err := tryDo(c, reps[i%len(reps)], request{path: "/v1/ops/chat", apiKey: acmeKey, key: key, body: chatBody,
					headers: [][2]string{{"Prefer", "wait=10"}}})
				require.NoError(t, err)
				require.Contains(t, []int{http.StatusOK, http.StatusConflict}, a.status, "answer: %s", a)
				mu.Lock()
				runs[executionOf(a)]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return runs
}

func TestResetAndForcedRunsAcrossThreeReplicas(t *testing.T) {
	db, llm, c := database(t), numberedLLM(t), newClient(t)
	cfg := chatConfig(llm, "  - {name: chat, operation: openai_chat, allow_reset: true}\n  - {name: fixed, operation: openai_chat}\n", "")
	var reps []*service
	for range 3 {
		reps = append(reps, startService(t, productionEnv(db.DSN), cfg))
	}
	first := post(t, c, reps[0], "chat", acmeKey, "r1", chatBody)
	require.Equal(t, 1, executionOf(first), "first: %s", first)
	for _, s := range reps { // every replica has the answer in its replay cache
		for range 2 {
			a := post(t, c, s, "chat", acmeKey, "r1", chatBody)
			require.Equal(t, "true", a.header.Get("Idempotent-Replayed"))
			require.Equal(t, 1, executionOf(a))
		}
	}

	refusalsChangeNothing(t, c, reps, llm)

	// Reset through one replica: from its answer on, no replica replays the old answer.
	reset := del(t, c, reps[1], "chat", acmeKey, "r1")
	require.Equal(t, http.StatusOK, reset.status, "reset: %s", reset)
	runs := spread(t, c, reps, "r1", 1000)
	require.Zero(t, runs[1], "old answers after the reset: %v", runs)
	require.EqualValues(t, 3, llm.calls.Load(), "exactly one new execution: %v", runs)
	require.Equal(t, 1000, runs[3]+runs[0], "%v", runs)
	hist := do(t, c, reps[2], request{method: http.MethodGet, path: "/v1/ops/chat/keys/r1/history", apiKey: acmeKey})
	require.Equal(t, http.StatusOK, hist.status, "history: %s", hist)
	require.Contains(t, string(hist.body), `"kind":"reset"`)
	require.Regexp(t, `"kind":"reset"[^}]*"actor":"key:`, string(hist.body))

	// A forced request instead: one new execution, named, and only its answer after it.
	forced := post(t, c, reps[2], "chat", acmeKey, "r1", chatBody, forceNew)
	require.Equal(t, http.StatusOK, forced.status, "forced: %s", forced)
	require.Equal(t, "1", forced.header.Get("Idempotent-Replaces-Attempt"))
	require.Equal(t, 4, executionOf(forced))
	runs = spread(t, c, reps, "r1", 1000)
	require.Equal(t, map[int]int{4: 1000}, runs, "every later replay carries the new answer")
	require.EqualValues(t, 4, llm.calls.Load())

	tenForcedRunOnce(t, c, reps, llm)
}

// refusalsChangeNothing: another tenant's key and an absent key are 404, a scope that forbids
// resets answers 403 to a reset and to a forced request, and nothing runs.
func refusalsChangeNothing(t *testing.T, c *http.Client, reps []*service, llm *fakeLLM) {
	t.Helper()
	require.Equal(t, http.StatusNotFound, del(t, c, reps[1], "chat", globexKey, "r1").status, "another tenant's key")
	require.Equal(t, http.StatusNotFound, del(t, c, reps[1], "chat", acmeKey, "absent").status)
	post(t, c, reps[0], "fixed", acmeKey, "f1", chatBody)
	require.Equal(t, http.StatusForbidden, del(t, c, reps[1], "fixed", acmeKey, "f1").status, "a scope that forbids resets")
	require.Equal(t, http.StatusForbidden, post(t, c, reps[1], "fixed", acmeKey, "f1", chatBody, forceNew).status)
	require.EqualValues(t, 2, llm.calls.Load())

}

// tenForcedRunOnce sends ten forced requests for r1 at once over the replicas: the operation
// runs once, one answer names the attempt it replaced, and the replays carry its answer.
func tenForcedRunOnce(t *testing.T, c *http.Client, reps []*service, llm *fakeLLM) {
	t.Helper()
	var wg sync.WaitGroup
	var replaced atomic.Int32
	for i := range 10 {
		wg.Go(func() {
			a, err := tryDo(c, reps[i%3], request{path: "/v1/ops/chat", apiKey: acmeKey, key: "r1", body: chatBody, headers: [][2]string{forceNew}})
			require.NoError(t, err)
			require.Contains(t, []int{http.StatusOK, http.StatusConflict}, a.status, "answer: %s", a)
			if a.header.Get("Idempotent-Replaces-Attempt") != "" {
				replaced.Add(1)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 5, llm.calls.Load(), "ten concurrent forced requests run it once")
	require.EqualValues(t, 1, replaced.Load())
	require.Equal(t, map[int]int{5: 30}, spread(t, c, reps, "r1", 30))
}

// del is DELETE /v1/ops/{scope}/keys/{key} on s.
func del(t *testing.T, c *http.Client, s *service, scope, apiKey, key string) answer {
	t.Helper()
	return do(t, c, s, request{method: http.MethodDelete, path: "/v1/ops/" + scope + "/keys/" + key, apiKey: apiKey})
}
