package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// One tenant's 200 background submissions run up to its job limit and get
// 429 job-limit past it, and another tenant's request is served at once
// meanwhile: the built binary, with its configuration, over MariaDB.
func TestOneTenantCannotTakeTheService(t *testing.T) {
	t.Parallel()
	db := database(t)
	llm := newFakeLLM(t)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	const jobs = 8
	llm.set(func(n int32, w http.ResponseWriter, r *http.Request) {
		if n <= jobs { // the flood's executions hold on until released
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		complete(w, n)
	})
	s := startService(t, productionEnv(db.DSN), chatConfig(llm, "  - {name: chat, operation: openai_chat}\n",
		fmt.Sprintf("limits: {jobs: %d}\n", jobs)))
	c := newClient(t)

	const n = 200
	answers := make([]answer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			answers[i], errs[i] = tryDo(c, s, request{path: "/v1/ops/chat", apiKey: acmeKey, key: fmt.Sprintf("flood-%03d", i),
				body: chatBody, headers: [][2]string{{"Prefer", "respond-async"}}})
		})
	}
	wg.Wait()
	byStatus := map[int]int{}
	for i, a := range answers {
		require.NoError(t, errs[i])
		byStatus[a.status]++
		if a.status == http.StatusTooManyRequests {
			var p problem
			require.NoError(t, json.Unmarshal(a.body, &p))
			require.Equal(t, "urn:idemguard:problem:job-limit", p.Type)
			require.Equal(t, "rate_limited", p.StopReason)
			require.NotEmpty(t, a.header.Get("Retry-After"))
		}
	}
	require.Equal(t, map[int]int{http.StatusAccepted: jobs, http.StatusTooManyRequests: n - jobs}, byStatus)
	eventually(t, 10*time.Second, "the admitted jobs call the upstream", func() bool { return llm.calls.Load() == jobs })

	// globex is served at once.
	start := time.Now()
	a := post(t, c, s, "chat", globexKey, "quick", chatBody)
	require.Equal(t, http.StatusOK, a.status, "%s", a)
	require.Less(t, time.Since(start), 2*time.Second)
	require.EqualValues(t, jobs+1, llm.calls.Load(), "a refused submission reached the upstream")

	// Once the jobs end, acme may start another.
	free()
	eventually(t, 10*time.Second, "a job's place is given back", func() bool {
		a, err := tryDo(c, s, request{path: "/v1/ops/chat", apiKey: acmeKey, key: "after", body: chatBody,
			headers: [][2]string{{"Prefer", "respond-async"}}})
		return err == nil && a.status == http.StatusAccepted
	})
}
