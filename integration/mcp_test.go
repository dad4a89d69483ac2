package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/mcptest"
	"github.com/idemguard/idemguard/routers/auth"
)

// The MCP door of the built binary, driven by the official Go MCP client over Streamable HTTP:
// two replicas of serve on one MariaDB, the fake upstream, the host configuration README.md
// gives.

// mcpCanary is in the upstream's private fields (outside the allowlist): it must reach no tool
// result, row or log.
const mcpCanary = "mcp-canary-3f9d71"

// completeWithCanary writes a completion whose provider-private fields hold the canary.
func completeWithCanary(w http.ResponseWriter, n int32) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"chatcmpl-%d-%s","object":"chat.completion","model":%q,"system_fingerprint":%q,
"choices":[{"index":0,"message":{"role":"assistant","content":"Heron launches in May."},"finish_reason":"stop","logprobs":{"note":%q}}],
"usage":{"prompt_tokens":21,"completion_tokens":6,"total_tokens":27},"provider_trace":%q}`, n, mcpCanary, model, mcpCanary, mcpCanary, mcpCanary)
}

// readmeMCPHost is the MCP host configuration of README.md's "Use it from an agent (MCP)"
// section, and the configuration line that turns the door on.
func readmeMCPHost(t *testing.T) (url string, headers map[string]string, configLine string) {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "## Use it from an agent (MCP)\n")
	require.True(t, ok, "README.md has no MCP section")
	section, _, _ = strings.Cut(section, "\n## ")
	block := regexp.MustCompile("(?s)```json\n(.*?)```").FindStringSubmatch(section)
	require.NotNil(t, block, "the MCP section has no json block")
	var host struct {
		MCPServers map[string]struct {
			Type    string            `json:"type"`
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"mcpServers"`
	}
	require.NoError(t, json.Unmarshal([]byte(block[1]), &host))
	server, ok := host.MCPServers["idemguard"]
	require.True(t, ok)
	require.Equal(t, "http", server.Type)
	line := regexp.MustCompile("`(mcp: \\{path: /[a-z]+\\})`").FindStringSubmatch(section)
	require.NotNil(t, line, "the MCP section names no mcp: {path: …} setting")
	return server.URL, server.Headers, line[1]
}

// mcpConnect connects the official client to url with the README's headers, the placeholder
// replaced by apiKey.
func mcpConnect(t *testing.T, url string, headers map[string]string, apiKey string) *mcp.ClientSession {
	t.Helper()
	h := map[string]string{}
	for k, v := range headers {
		h[k] = strings.ReplaceAll(v, "YOUR_API_KEY", apiKey)
	}
	cs, err := mcptest.Connect(t, url, h)
	require.NoError(t, err)
	return cs
}

// mcpResults collects every tool result the test saw, for the canary check.
type mcpResults struct {
	mu  sync.Mutex
	all []string
}

func (r *mcpResults) call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err)
	b, err := json.Marshal(res)
	require.NoError(t, err)
	r.mu.Lock()
	r.all = append(r.all, string(b))
	r.mu.Unlock()
	return res
}

func mcpPrompt(text string) []any {
	return []any{map[string]any{"role": "user", "content": text}}
}

// TestMCPDoorOfTheBuiltBinary: list tools; one key called twice runs the upstream once, the
// second marked replayed; forceNew runs it again; two clients on two replicas racing one key run it once; other inputs
// under a key are a tool error; an async scope's job is read and cancelled by its tenant only;
// another tenant neither sees nor calls a scope it is not configured for; the audit trail names
// the MCP caller; the canary in the upstream's private fields is in no result, row or log.
func TestMCPDoorOfTheBuiltBinary(t *testing.T) {
	t.Parallel()
	db, llm := database(t), newFakeLLM(t)
	llm.set(func(n int32, w http.ResponseWriter, _ *http.Request) { completeWithCanary(w, n) })
	url, headers, configLine := readmeMCPHost(t)
	cfg := chatConfig(llm, "  - {name: chat, operation: openai_chat, allow_reset: true}\n"+
		"  - {name: research, operation: openai_chat, async: true, stale_after: 1500ms}\n"+
		"  - {name: acme.private, operation: openai_chat, tenants: [acme]}\n", configLine)
	env := productionEnv(db.DSN)
	env["IDEMGUARD_API_KEYS"] = "acme:billing=" + auth.HashAPIKey(acmeKey) + ",globex:" + auth.HashAPIKey(globexKey)
	a, b := startService(t, env, cfg), startService(t, env, cfg)
	at := func(s *service) string { return strings.Replace(url, "127.0.0.1:8080", s.addr, 1) }
	require.NotEqual(t, url, at(a), "the README's URL names the default listen address")
	results := &mcpResults{}

	acme := mcpConnect(t, at(a), headers, acmeKey)
	require.Subset(t, mcptest.ToolNames(t, acme), []string{"chat", "research", "acme.private", "idemguard_job_status", "idemguard_job_cancel"})

	// One key, twice: one upstream call, the second marked replayed, the same answer.
	args := map[string]any{"messages": mcpPrompt("plan the launch"), "max_tokens": 16, "idempotencyKey": "mcp-1"}
	first := results.call(t, acme, "chat", args)
	require.False(t, first.IsError, "%v", first.Content)
	require.Equal(t, false, first.Meta["idemguard/replayed"])
	again := results.call(t, acme, "chat", args)
	require.Equal(t, true, again.Meta["idemguard/replayed"])
	require.Equal(t, true, mcptest.Structured(t, again)["cached"])
	require.Equal(t, mcptest.Structured(t, first)["data"], mcptest.Structured(t, again)["data"])
	require.EqualValues(t, 1, llm.calls.Load())

	// forceNew (the scope allows forced runs): the key runs again, its answer replacing attempt 1.
	forced := results.call(t, acme, "chat", map[string]any{"messages": mcpPrompt("plan the launch"), "max_tokens": 16,
		"idempotencyKey": "mcp-1", "forceNew": true})
	require.False(t, forced.IsError, "%v", forced.Content)
	require.EqualValues(t, 1, forced.Meta["idemguard/replacesAttempt"])
	require.EqualValues(t, 2, llm.calls.Load())
	require.Equal(t, true, results.call(t, acme, "chat", args).Meta["idemguard/replayed"])

	// The same key with other inputs: a tool error naming the cause; nothing runs.
	other := results.call(t, acme, "chat", map[string]any{"messages": mcpPrompt("something else"), "idempotencyKey": "mcp-1"})
	require.True(t, other.IsError)
	require.Contains(t, mcptest.Structured(t, other)["type"], "idempotency-key-reused")
	require.EqualValues(t, 2, llm.calls.Load())

	mcpRace(t, llm, results, acme, mcpConnect(t, at(b), headers, acmeKey))
	mcpJob(t, llm, results, acme, mcpConnect(t, at(b), headers, globexKey))

	// The audit trail names the MCP caller: acme's key, by its name.
	eventually(t, 10*time.Second, "the audit trail names the MCP caller", func() bool {
		var actors []string
		require.NoError(t, db.DB.Select(&actors, `SELECT actor FROM idempotency_audit WHERE tenant = 'acme' AND scope = 'chat'
			UNION SELECT actor FROM idempotency_audit_tally WHERE tenant = 'acme' AND scope = 'chat'`))
		return slices.Equal(actors, []string{"key:billing"})
	})

	var rows []string
	require.NoError(t, db.DB.Select(&rows, "SELECT CONCAT_WS('|', tenant, scope, status, COALESCE(CAST(response_json AS CHAR), '')) FROM idempotency_keys"))
	require.NotEmpty(t, rows)
	sinks := map[string]string{"results": strings.Join(results.all, "\n"), "rows": strings.Join(rows, "\n"),
		"log a": a.logs.String(), "log b": b.logs.String()}
	for name, s := range sinks {
		require.NotEmpty(t, s, name)
		for _, canary := range []string{mcpCanary, "plan the launch", acmeKey, globexKey, secret} {
			require.NotContains(t, s, canary, name)
		}
	}
}

// mcpRace: two clients on two replicas call one key at once: one upstream call, both get the
// same answer, one of them as a replay.
func mcpRace(t *testing.T, llm *fakeLLM, results *mcpResults, c1, c2 *mcp.ClientSession) {
	t.Helper()
	before := llm.calls.Load()
	hold, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	llm.set(func(n int32, w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(hold) })
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		completeWithCanary(w, n)
	})
	args := map[string]any{"messages": mcpPrompt("plan the launch together"), "idempotencyKey": "mcp-race"}
	var wg sync.WaitGroup
	out := make([]*mcp.CallToolResult, 2)
	for i, cs := range []*mcp.ClientSession{c1, c2} {
		wg.Go(func() { out[i] = results.call(t, cs, "chat", args) })
	}
	select {
	case <-hold:
	case <-time.After(20 * time.Second):
		t.Fatal("no upstream call")
	}
	close(release)
	wg.Wait()
	require.Equal(t, before+1, llm.calls.Load(), "one upstream call for the key")
	require.False(t, out[0].IsError, "%v", out[0].Content)
	require.False(t, out[1].IsError, "%v", out[1].Content)
	require.Equal(t, mcptest.Structured(t, out[0])["data"], mcptest.Structured(t, out[1])["data"])
	replayed := 0
	for _, r := range out {
		if r.Meta["idemguard/replayed"] == true {
			replayed++
		}
	}
	require.Equal(t, 1, replayed, "one answer is the execution's own, the other a replay")
	llm.set(func(n int32, w http.ResponseWriter, _ *http.Request) { completeWithCanary(w, n) })
}

// mcpJob: an async scope answers at once with the job's record; globex sees no scope of acme's
// alone and can neither read nor cancel acme's job; acme cancels it, and it stops.
func mcpJob(t *testing.T, llm *fakeLLM, results *mcpResults, acme, globex *mcp.ClientSession) {
	t.Helper()
	before := llm.calls.Load()
	llm.set(func(_ int32, _ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	started := results.call(t, acme, "research", map[string]any{"messages": mcpPrompt("research the market"), "idempotencyKey": "job-1"})
	require.False(t, started.IsError, "%v", started.Content)
	rec := mcptest.Structured(t, started)
	require.Equal(t, "started", rec["status"])
	require.Equal(t, "job-1", rec["ref"])
	eventually(t, 10*time.Second, "the job's upstream call", func() bool { return llm.calls.Load() == before+1 })

	tools := mcptest.ToolNames(t, globex)
	require.Contains(t, tools, "research")
	require.NotContains(t, tools, "acme.private")
	_, err := globex.CallTool(context.Background(), &mcp.CallToolParams{Name: "acme.private", Arguments: map[string]any{"messages": mcpPrompt("x")}})
	require.ErrorContains(t, err, "unknown tool")
	for _, tool := range []string{"idemguard_job_status", "idemguard_job_cancel"} {
		res := results.call(t, globex, tool, map[string]any{"scope": "research", "ref": "job-1"})
		require.True(t, res.IsError, tool)
		require.EqualValues(t, http.StatusNotFound, mcptest.Structured(t, res)["status"], tool)
	}

	canceled := results.call(t, acme, "idemguard_job_cancel", map[string]any{"scope": "research", "ref": "job-1"})
	require.False(t, canceled.IsError, "%v", canceled.Content)
	require.Equal(t, true, mcptest.Structured(t, canceled)["cancelRequested"])
	eventually(t, 10*time.Second, "the job stops", func() bool {
		st := mcptest.Structured(t, results.call(t, acme, "idemguard_job_status", map[string]any{"scope": "research", "ref": "job-1"}))
		return st["status"] == "failed"
	})
	llm.set(func(n int32, w http.ResponseWriter, _ *http.Request) { completeWithCanary(w, n) })
}
