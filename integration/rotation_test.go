package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The two secrets of a rotation. The old one is the suite's usual secret.
const (
	oldSecret = secret
	newSecret = "integration-rotated-secret-fedcba9876543210"
)

// The configurations a replica goes through in a rolling rotation
// (docs/OPERATIONS.md, "Rotating the secret").
var (
	// Before: the old secret alone.
	oldOnly = map[string]string{"IDEMPOTENCY_SECRET": oldSecret, "IDEMPOTENCY_SECRET_ID": "old"}
	// Step 1: still claiming under the old secret, recognising the new one.
	learnsNew = map[string]string{"IDEMPOTENCY_SECRET": oldSecret, "IDEMPOTENCY_SECRET_ID": "old",
		"IDEMPOTENCY_PREVIOUS_SECRETS": "new:" + newSecret}
	// Step 2: claiming under the new secret, recognising the old one.
	switched = map[string]string{"IDEMPOTENCY_SECRET": newSecret, "IDEMPOTENCY_SECRET_ID": "new",
		"IDEMPOTENCY_PREVIOUS_SECRETS": "old:" + oldSecret}
	// Too early: the old secret dropped while its rows live.
	newOnly = map[string]string{"IDEMPOTENCY_SECRET": newSecret, "IDEMPOTENCY_SECRET_ID": "new"}
)

func rotationEnv(dsn string, secrets map[string]string) map[string]string {
	env := productionEnv(dsn)
	for k, v := range secrets {
		env[k] = v
	}
	return env
}

// A rolling rotation of the secret over three serve processes on one MariaDB: the old secret
// alone; every replica learning the new one (one at a time); every replica switching to it
// (one at a time, so old and new claim side by side); the new one with the old as previous.
// In each steady phase, and across each replacement (the new process up beside the old one, a
// surge deploy, both taking the storm), 500 concurrent requests with one key → exactly one
// upstream call per key, and every answer the first one's, byte for byte. A key completed
// under the old secret is replayed after the switch, and another body under it is 422.
// Checked: with the check a won claim makes for the request's rows under the other secrets
// (crossCheck in secrets.go) disabled, this test fails at the first storm in which replicas
// claim under both secrets (switch-0: two fresh answers, two upstream calls).
func TestRollingSecretRotationRunsEachKeyOnce(t *testing.T) {
	t.Parallel()
	db, llm, c := database(t), newFakeLLM(t), newClient(t)
	llm.set(func(n int32, w http.ResponseWriter, r *http.Request) {
		select { // long enough for the storm to arrive while it runs
		case <-time.After(500 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		complete(w, n)
	})
	cfg := chatConfig(llm, "  - {name: chat, operation: openai_chat}\n", "")
	start := func(secrets map[string]string) *service { return startService(t, rotationEnv(db.DSN, secrets), cfg) }

	replicas := []*service{start(oldOnly), start(oldOnly), start(oldOnly)}
	keys := 0
	storm := func(name string, over []*service) answer {
		t.Helper()
		keys++
		first := stormOnce(t, c, over, "rotation-"+name)
		require.EqualValues(t, keys, llm.calls.Load(), "storm %s: one upstream call per key", name)
		return first
	}
	firstOld := storm("old-only", replicas)

	// A rolling deploy replaces one replica at a time: the new one starts, both serve, the
	// old one stops.
	roll := func(step string, secrets map[string]string) {
		for i := range replicas {
			next := start(secrets)
			storm(fmt.Sprintf("%s-%d", step, i), append(append([]*service{}, replicas...), next))
			replicas[i].kill()
			replicas[i] = next
			if step == "switch" && i == 0 {
				storm("mixed", replicas) // one replica claims under the new secret, two under the old
			}
		}
	}
	roll("learn", learnsNew)
	storm("learned", replicas)
	roll("switch", switched)
	storm("switched", replicas)

	// The key completed under the old secret is replayed by every replica, never run again;
	// another body under it is a mismatch.
	for _, s := range replicas {
		requireReplayOf(t, firstOld, post(t, c, s, "chat", acmeKey, "rotation-old-only", chatBody))
	}
	other := strings.Replace(chatBody, "Project Heron", "Project Egret", 1)
	requireProblem(t, post(t, c, replicas[0], "chat", acmeKey, "rotation-old-only", other), http.StatusUnprocessableEntity, "")
	require.EqualValues(t, keys, llm.calls.Load(), "replays and mismatches call nothing")

	// The key record names the secret id, never the secret.
	for key, id := range map[string]string{"rotation-old-only": "old", "rotation-switched": "new"} {
		a := do(t, c, replicas[1], request{method: http.MethodGet, path: "/v1/ops/chat/keys/" + key, apiKey: acmeKey})
		require.Equal(t, http.StatusOK, a.status, "lookup %s: %s", key, a)
		var rec struct {
			SecretID string `json:"secretId"`
		}
		require.NoError(t, json.Unmarshal(a.body, &rec))
		require.Equal(t, id, rec.SecretID, key)
		require.NotContains(t, string(a.body), oldSecret)
		require.NotContains(t, string(a.body), newSecret)
	}

	// One row per key: every claim a replica gave back to another secret's row is gone.
	require.Equal(t, keys, countRows(t, db))

	// stats secrets says how many live rows each id holds: the old one cannot be dropped yet.
	out, err := exec.Command(binary, "stats", "secrets", "--json", "--dsn", db.DSN).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var counts struct {
		Secrets []struct {
			ID   string `json:"secret_id"`
			Live int    `json:"live_rows"`
		} `json:"secrets"`
	}
	require.NoError(t, json.Unmarshal(out, &counts), "%s", out)
	live := map[string]int{}
	for _, s := range counts.Secrets {
		live[s.ID] = s.Live
	}
	require.Equal(t, keys, live["old"]+live["new"], "%s", out)
	require.Positive(t, live["old"])
	require.Positive(t, live["new"])

	// Dropping the old secret while its rows live is what the start-up warning is for.
	early := start(newOnly)
	eventually(t, 10*time.Second, "the warning about rows under an unconfigured id", func() bool {
		return strings.Contains(early.logs.String(), "live rows under a secret id this process is not configured with")
	})
	logs := early.logs.String()
	require.Contains(t, logs, `"secret_id":"old"`)
	require.Contains(t, logs, fmt.Sprintf(`"rows":%d`, live["old"]))
	for _, s := range append(replicas, early) {
		require.NotContains(t, s.logs.String(), oldSecret)
		require.NotContains(t, s.logs.String(), newSecret)
	}
}

// stormOnce sends 500 concurrent requests with one key, spread over services, each waiting
// for the answer (Prefer: wait) and asking again, as a client does, after a 409 (in progress),
// a 429 (more requests already wait for the key in that process than max_waiters allows) or a
// 503 (the store did not answer in time: nothing ran; under a full parallel test run 500
// waiting requests can queue past store_timeout for a connection), and returns the fresh
// answer; every other answer must be its replay.
func stormOnce(t *testing.T, c *http.Client, services []*service, key string) answer {
	t.Helper()
	const n = 500
	begin := make(chan struct{})
	answers := make([]answer, n)
	errs := make([]error, n)
	var mu sync.Mutex
	retried := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-begin
			deadline := time.Now().Add(60 * time.Second)
			for {
				a, err := tryDo(c, services[i%len(services)], request{path: "/v1/ops/chat", apiKey: acmeKey, key: key,
					body: chatBody, headers: [][2]string{{"Prefer", "wait=10"}}})
				again := err == nil && (a.status == http.StatusConflict || a.status == http.StatusTooManyRequests ||
					a.status == http.StatusServiceUnavailable)
				if !again || time.Now().After(deadline) {
					answers[i], errs[i] = a, err
					return
				}
				mu.Lock()
				retried[a.status]++
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	close(begin)
	wg.Wait()
	if len(retried) > 0 {
		t.Logf("storm %s: asked again after %v", key, retried)
	}
	var first answer
	fresh := 0
	for i := range n {
		require.NoError(t, errs[i], "request %d", i)
		require.Equal(t, http.StatusOK, answers[i].status, "request %d: %s", i, answers[i])
		if answers[i].header.Get("Idempotent-Replayed") == "" {
			first = answers[i]
			fresh++
		}
	}
	require.Equal(t, 1, fresh, "storm %s: one fresh answer", key)
	require.Equal(t, 1, bytes.Count(first.body, []byte(`"cached":false`)))
	for i := range n {
		if answers[i].header.Get("Idempotent-Replayed") != "" {
			requireReplayOf(t, first, answers[i])
		}
	}
	return first
}
