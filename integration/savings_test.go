package integration

import (
	"encoding/json"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// After N replays of an answer whose execution used T tokens, the avoided
// counters grew by N×T (and by N calls, and by their cost at the scope's
// prices), and `idemguard stats` shows the same per tenant and scope. The
// fake upstream's completion uses 21 prompt and 6 completion tokens.
func TestReplaysCountTheTokensAndMoneyTheySaved(t *testing.T) {
	t.Parallel()
	db, llm, c := database(t), newFakeLLM(t), newClient(t)
	cfg := chatConfig(llm, "  - {name: chat, operation: openai_chat, prices: {prompt_per_million: 2.5, completion_per_million: 10}}\n", "")
	s := startService(t, productionEnv(db.DSN), cfg)
	const n, promptTokens, completionTokens = 5, 21, 6
	first := post(t, c, s, "chat", acmeKey, "saved-1", chatBody)
	for range n {
		requireReplayOf(t, first, post(t, c, s, "chat", acmeKey, "saved-1", chatBody))
	}
	require.EqualValues(t, 1, llm.calls.Load())

	resp, err := c.Get(s.url("/metrics"))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	metrics := string(body)
	require.Equal(t, n, metricValue(t, metrics, `idemguard_avoided_calls_total{scope="chat"}`))
	require.Equal(t, n*promptTokens, metricValue(t, metrics, `idemguard_avoided_tokens_total{kind="prompt",scope="chat"}`))
	require.Equal(t, n*completionTokens, metricValue(t, metrics, `idemguard_avoided_tokens_total{kind="completion",scope="chat"}`))
	wantCost := n * (promptTokens*2.5 + completionTokens*10) / 1e6
	require.InDelta(t, wantCost, metricFloat(t, metrics, `idemguard_avoided_cost_total{scope="chat"}`), 1e-12)

	// The final flush at shutdown writes the counts stats reads.
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, s.waitExit(20*time.Second), "exit status")
	out, err := exec.Command(binary, "stats", "--dsn", db.DSN, "--since", "1h", "--json").Output()
	require.NoError(t, err)
	var report struct {
		Savings []struct {
			Tenant                  string `json:"tenant"`
			Scope                   string `json:"scope"`
			Executions              int64  `json:"executions"`
			AvoidedCalls            int64  `json:"avoided_calls"`
			AvoidedPromptTokens     int64  `json:"avoided_prompt_tokens"`
			AvoidedCompletionTokens int64  `json:"avoided_completion_tokens"`
			AvoidedCostNanos        int64  `json:"avoided_cost_nanos"`
		} `json:"savings"`
	}
	require.NoError(t, json.Unmarshal(out, &report), string(out))
	require.Len(t, report.Savings, 1, string(out))
	sv := report.Savings[0]
	require.Equal(t, "acme", sv.Tenant)
	require.Equal(t, "chat", sv.Scope)
	require.EqualValues(t, 1, sv.Executions)
	require.EqualValues(t, n, sv.AvoidedCalls)
	require.EqualValues(t, n*promptTokens, sv.AvoidedPromptTokens)
	require.EqualValues(t, n*completionTokens, sv.AvoidedCompletionTokens)
	require.EqualValues(t, 562500, sv.AvoidedCostNanos, "5 × (21 × 2.5 + 6 × 10) per million tokens, in billionths")

	text, err := exec.Command(binary, "stats", "--dsn", db.DSN, "--since", "1h").Output()
	require.NoError(t, err)
	require.Regexp(t, `(?m)^acme\s+chat\s+1\s+5\s+105\s+30\s+0\.0005625$`, string(text), "the table shows the tenant's savings")
}

// metricFloat reads one sample of the Prometheus text exposition as a float.
func metricFloat(t *testing.T, body, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	require.NotNil(t, m, "no sample %s in /metrics", series)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}
