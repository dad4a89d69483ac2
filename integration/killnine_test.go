package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/faulttest"
)

// `kill -9` of a serve process while 20 operations
// are at random points of their lives (claiming, calling the upstream,
// committing). After a restart every key ends succeeded; the upstream
// calls of one key never overlap in time; no key ran more than twice.
func TestKillNineAtRandomPointsOfTwentyOperations(t *testing.T) {
	t.Parallel()
	db, c := database(t), newClient(t)
	rec := faulttest.NewRecorder()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
			return
		}
		key := req.Messages[0].Content
		// 100–400 ms, or until serve goes away (its connection closes).
		if _, err := rec.Op(key, time.Duration(100+rand.N(300))*time.Millisecond)(r.Context()); err != nil {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":"done %s"},"finish_reason":"stop"}]}`, key)
	}))
	t.Cleanup(upstream.Close)
	cfg := fmt.Sprintf("openai: {base_url: %q, model: %q, timeout: 20s}\nstore_timeout: 2s\nscopes:\n"+
		"  - {name: chat, operation: openai_chat, stale_after: 1s}\n", upstream.URL+"/v1", model)
	env := productionEnv(db.DSN)
	body := func(key string) string {
		return `{"messages":[{"role":"user","content":"` + key + `"}],"max_tokens":16}`
	}

	a := startService(t, env, cfg)
	var wg sync.WaitGroup
	for i := range 20 {
		key := fmt.Sprintf("kill9-%02d", i)
		wg.Go(func() {
			time.Sleep(time.Duration(rand.N(500)) * time.Millisecond)
			_, _ = tryDo(c, a, request{path: "/v1/ops/chat", apiKey: acmeKey, key: key, body: body(key)})
		})
	}
	time.Sleep(time.Duration(200+rand.N(400)) * time.Millisecond)
	a.kill()
	wg.Wait()
	ran := len(rec.Keys())
	require.Positive(t, ran, "the kill came before any operation ran: nothing was tested")

	b := startService(t, env, cfg)
	for i := range 20 {
		key := fmt.Sprintf("kill9-%02d", i)
		wg.Go(func() {
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				ans, err := tryDo(c, b, request{path: "/v1/ops/chat", apiKey: acmeKey, key: key, body: body(key),
					headers: [][2]string{{"Prefer", "wait=5"}}})
				if err == nil && ans.status == http.StatusOK {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Errorf("key %s never succeeded after the restart", key)
		})
	}
	wg.Wait()

	require.Empty(t, rec.Overlaps(), "executions of a key overlapped")
	twice := 0
	for i := range 20 {
		key := fmt.Sprintf("kill9-%02d", i)
		runs := len(rec.Runs(key))
		require.LessOrEqual(t, runs, 2, "key %s ran %d times", key, runs)
		require.Positive(t, runs, "key %s never ran", key)
		if runs == 2 {
			twice++
		}
	}
	var states []struct {
		Status   string `db:"status"`
		Attempts int    `db:"attempt_count"`
	}
	require.NoError(t, db.DB.Select(&states, `SELECT status, attempt_count FROM idempotency_keys`))
	require.Len(t, states, 20)
	for _, s := range states {
		require.Equal(t, "succeeded", s.Status)
		require.LessOrEqual(t, s.Attempts, 2)
	}
	t.Logf("%d keys had started before the kill; %d ran a second time after it", ran, twice)
}
