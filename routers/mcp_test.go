package routers

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/mcptest"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/routers/auth/authtest"
	"github.com/idemguard/idemguard/tenancy"
)

// mcpSetup is the test API with the MCP door at /mcp: "slow" is async,
// "created" is acme's only, "echo" allows forced runs.
func mcpSetup(t *testing.T) (*testBundle, *httptest.Server) {
	t.Helper()
	b := setup(t, setupOpts{options: func(o *Options) {
		o.MCPPath = "/mcp"
		o.MaxWait = 2 * time.Second
		for i := range o.Scopes {
			switch o.Scopes[i].Name {
			case "slow":
				o.Scopes[i].Async = true
			case "created":
				o.Scopes[i].Tenants = []tenancy.ID{"acme"}
			case "echo":
				o.Scopes[i].Settings.AllowReset = true
			}
		}
	}})
	srv := httptest.NewServer(b.handler)
	t.Cleanup(srv.Close)
	return b, srv
}

// mcpSession connects the official client to srv's door with token.
func mcpSession(t *testing.T, srv *httptest.Server, token string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcptest.Connect(t, srv.URL+"/mcp", map[string]string{"Authorization": "Bearer " + token})
	require.NoError(t, err)
	return cs
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	return res
}

// TestMCPToolsAreTheCallersScopes: a tenant sees the scopes it may use as
// tools (with idempotencyKey in their schema), and the job tools when one
// is async; another tenant does not see a scope of acme's only, and cannot
// call it. A request without a credential is a 401.
func TestMCPToolsAreTheCallersScopes(t *testing.T) {
	t.Parallel()
	_, srv := mcpSetup(t)
	acme := mcpSession(t, srv, acmeKey1)
	names := mcptest.ToolNames(t, acme)
	require.Contains(t, names, "echo")
	require.Contains(t, names, "created")
	require.Contains(t, names, "idemguard_job_status")
	require.Contains(t, names, "idemguard_job_cancel")
	tools, err := acme.ListTools(context.Background(), nil)
	require.NoError(t, err)
	for _, tool := range tools.Tools {
		if tool.Name == "actionRequests.aiProposeCopy" {
			schema, _ := json.Marshal(tool.InputSchema)
			require.Contains(t, string(schema), `"required":["idempotencyKey"]`)
		}
	}

	beta := mcpSession(t, srv, betaKey)
	require.NotContains(t, mcptest.ToolNames(t, beta), "created")
	_, err = beta.CallTool(context.Background(), &mcp.CallToolParams{Name: "created", Arguments: map[string]any{}})
	require.ErrorContains(t, err, "unknown tool")

	_, err = mcptest.Connect(t, srv.URL+"/mcp", map[string]string{"Authorization": "Bearer no-such-key"})
	require.Error(t, err)
	resp, err := http.Post(srv.URL+"/mcp", "application/json", nil)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// A reverse proxy on the same host forwards the public Host to a
	// loopback address: served like any request.
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	require.NoError(t, err)
	req.Host = "idemguard.example.com"
	req.Header.Set("Authorization", "Bearer "+acmeKey1)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), `"echo"`)
}

// TestMCPCallIsGuardedByItsKey: two calls with one key run the operation
// once, the second marked replayed; a call without a key derives it from
// the arguments; other arguments under the key are a tool error naming the
// mismatch, and nothing runs.
func TestMCPCallIsGuardedByItsKey(t *testing.T) {
	t.Parallel()
	b, srv := mcpSetup(t)
	cs := mcpSession(t, srv, acmeKey1)
	first := callTool(t, cs, "echo", map[string]any{"n": 1, "idempotencyKey": "order-1"})
	require.False(t, first.IsError)
	require.Equal(t, false, first.Meta["idemguard/replayed"])
	require.Equal(t, "order-1", first.Meta["idemguard/ref"])
	again := callTool(t, cs, "echo", map[string]any{"idempotencyKey": "order-1", "n": 1})
	require.False(t, again.IsError)
	require.Equal(t, true, again.Meta["idemguard/replayed"])
	require.Equal(t, true, mcptest.Structured(t, again)["cached"])
	require.Equal(t, mcptest.Structured(t, first)["data"], mcptest.Structured(t, again)["data"])
	require.NotContains(t, mcptest.Structured(t, again), "prompt", "fields outside the allowlist are never answered")
	require.EqualValues(t, 1, b.calls["echo"].Load())

	derived := callTool(t, cs, "echo", map[string]any{"n": 2})
	require.False(t, derived.IsError)
	require.Equal(t, true, callTool(t, cs, "echo", map[string]any{"n": 2}).Meta["idemguard/replayed"])
	require.EqualValues(t, 2, b.calls["echo"].Load())

	// The key derives as the REST API derives it: one operation for both doors.
	require.Equal(t, http.StatusOK, b.post("echo", "", `{ "n" : 7 }`).Code)
	require.Equal(t, true, callTool(t, cs, "echo", map[string]any{"n": 7}).Meta["idemguard/replayed"])
	require.Equal(t, "true", b.post("echo", "order-1", `{"n":1}`).Header().Get("Idempotent-Replayed"))
	require.EqualValues(t, 3, b.calls["echo"].Load())

	mismatch := callTool(t, cs, "echo", map[string]any{"n": 3, "idempotencyKey": "order-1"})
	require.True(t, mismatch.IsError)
	require.Contains(t, mcptest.Structured(t, mismatch)["type"], "idempotency-key-reused")
	require.EqualValues(t, 3, b.calls["echo"].Load())

	missing := callTool(t, cs, "actionRequests.aiProposeCopy", map[string]any{"n": 1})
	require.True(t, missing.IsError)
	require.Contains(t, mcptest.Structured(t, missing)["type"], "missing")
}

// TestMCPAsyncJob: an async scope answers at once with the job's record;
// another tenant cannot read or cancel it; its own tenant cancels it.
func TestMCPAsyncJob(t *testing.T) {
	t.Parallel()
	b, srv := mcpSetup(t)
	acme := mcpSession(t, srv, acmeKey1)
	started := callTool(t, acme, "slow", map[string]any{"n": 1, "idempotencyKey": "job-1"})
	require.False(t, started.IsError, "%v", started.Content)
	rec := mcptest.Structured(t, started)
	require.Equal(t, "started", rec["status"])
	require.Equal(t, "job-1", rec["ref"])
	<-b.started

	beta := mcpSession(t, srv, betaKey)
	for _, tool := range []string{"idemguard_job_status", "idemguard_job_cancel"} {
		res := callTool(t, beta, tool, map[string]any{"scope": "slow", "ref": "job-1"})
		require.True(t, res.IsError, tool)
		require.Equal(t, float64(http.StatusNotFound), mcptest.Structured(t, res)["status"], tool)
	}

	status := callTool(t, acme, "idemguard_job_status", map[string]any{"scope": "slow", "ref": "job-1"})
	require.False(t, status.IsError)
	require.Equal(t, "started", mcptest.Structured(t, status)["status"])
	canceled := callTool(t, acme, "idemguard_job_cancel", map[string]any{"scope": "slow", "ref": "job-1"})
	require.False(t, canceled.IsError, "%v", canceled.Content)
	require.Equal(t, true, mcptest.Structured(t, canceled)["cancelRequested"])
}

// TestScopeTenants: a scope listed for some tenants is unknown to every
// other, on the REST routes as on the MCP door: 404, nothing runs.
func TestScopeTenants(t *testing.T) {
	t.Parallel()
	b, _ := mcpSetup(t)
	w := b.do(req{method: http.MethodPost, path: "/v1/ops/created", body: `{}`, apiKey: betaKey})
	require.Equal(t, http.StatusNotFound, w.Code, w.Body.String())
	w = b.do(req{method: http.MethodGet, path: "/v1/ops/created/keys/k-1", apiKey: betaKey})
	require.Equal(t, http.StatusNotFound, w.Code, w.Body.String())
	require.EqualValues(t, 0, b.calls["created"].Load())
	require.Equal(t, http.StatusCreated, b.post("created", "k-1", `{}`).Code)
	require.EqualValues(t, 1, b.calls["created"].Load())
}

// TestMCPUsersOfOneTenant: over the MCP door a JWT caller sees only the
// scopes that accept JWTs; two users of one tenant have keys of their own
// (the scope's isolation), and one user's job reference reads and cancels
// nothing for the other, as on the REST API's key routes. The REST API
// replays to alice what her tool call stored under the same derived key.
func TestMCPUsersOfOneTenant(t *testing.T) {
	t.Parallel()
	rsaKey := authtest.RSA(t, "rsa-1")
	b := jwtSetup(t, rsaKey)
	b.opts.MCPPath = "/mcp"
	b.opts.ScopeAuth["slow"] = []auth.Method{auth.MethodJWT}
	for i := range b.opts.Scopes {
		b.opts.Scopes[i].Async = b.opts.Scopes[i].Name == "slow"
	}
	var err error
	b.handler, err = New(b.opts)
	require.NoError(t, err)
	srv := httptest.NewServer(b.handler)
	t.Cleanup(srv.Close)
	as := func(sub string) string { return rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { c["sub"] = sub }) }
	alice, mallory := mcpSession(t, srv, as("alice")), mcpSession(t, srv, as("mallory"))

	tools := mcptest.ToolNames(t, alice)
	require.ElementsMatch(t, []string{"echo", "slow", "idemguard_job_status", "idemguard_job_cancel"}, tools)
	require.NotContains(t, mcptest.ToolNames(t, mcpSession(t, srv, acmeKey1)), "slow", "an API key is not accepted on a JWT-only scope")

	first := callTool(t, alice, "echo", map[string]any{"n": 1})
	require.Equal(t, false, callTool(t, mallory, "echo", map[string]any{"n": 1}).Meta["idemguard/replayed"], "mallory got alice's answer")
	require.EqualValues(t, 2, b.calls["echo"].Load())
	w := b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: `{"n":1}`, apiKey: as("alice")})
	require.Equal(t, "true", w.Header().Get("Idempotent-Replayed"))
	require.Equal(t, first.Meta["idemguard/ref"], w.Header().Get("Idempotency-Key-Ref"), "one key, one reference")

	job := callTool(t, alice, "slow", map[string]any{"n": 2})
	require.False(t, job.IsError, "%v", job.Content)
	<-b.started
	ref := mcptest.Structured(t, job)["ref"]
	for _, tool := range []string{"idemguard_job_status", "idemguard_job_cancel"} {
		res := callTool(t, mallory, tool, map[string]any{"scope": "slow", "ref": ref})
		require.True(t, res.IsError, tool)
		require.EqualValues(t, http.StatusNotFound, mcptest.Structured(t, res)["status"], tool)
	}
	status := callTool(t, alice, "idemguard_job_status", map[string]any{"scope": "slow", "ref": ref})
	require.Equal(t, "started", mcptest.Structured(t, status)["status"])

	// With wait, the status follows the job until it completes: the job
	// is let finish only once the status call has read the key (its
	// watch, or without one its record).
	reads := b.gets.Load()
	answer := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := alice.CallTool(context.Background(), &mcp.CallToolParams{Name: "idemguard_job_status",
			Arguments: map[string]any{"scope": "slow", "ref": ref, "wait": 10}})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, StructuredContent: map[string]any{"err": err.Error()}}
		}
		answer <- res
	}()
	require.Eventually(t, func() bool { return b.gets.Load() >= reads+1 }, 5*time.Second, time.Millisecond)
	b.releaseNow()
	done := mcptest.Structured(t, <-answer)
	require.Equal(t, "succeeded", done["status"], "%v", done)
	require.Equal(t, true, done["response"].(map[string]any)["ok"])
}

// TestMCPForceNew: where the scope allows forced runs its tool takes
// forceNew: a finished key runs again, its answer replaces the stored one
// (marked with the attempt it replaced), and later calls replay the new
// answer. Elsewhere forceNew is not the door's: the schema has none.
func TestMCPForceNew(t *testing.T) {
	t.Parallel()
	b, srv := mcpSetup(t)
	cs := mcpSession(t, srv, acmeKey1)
	tools, err := cs.ListTools(context.Background(), nil)
	require.NoError(t, err)
	for _, tool := range tools.Tools {
		schema, _ := json.Marshal(tool.InputSchema)
		require.Equal(t, tool.Name == "echo", strings.Contains(string(schema), `"forceNew"`), tool.Name)
	}
	first := callTool(t, cs, "echo", map[string]any{"n": 1, "idempotencyKey": "f-1"})
	require.False(t, first.IsError)
	require.Equal(t, true, callTool(t, cs, "echo", map[string]any{"n": 1, "idempotencyKey": "f-1"}).Meta["idemguard/replayed"])
	forced := callTool(t, cs, "echo", map[string]any{"n": 1, "idempotencyKey": "f-1", "forceNew": true})
	require.False(t, forced.IsError, "%v", forced.Content)
	require.Equal(t, false, forced.Meta["idemguard/replayed"])
	require.EqualValues(t, 1, forced.Meta["idemguard/replacesAttempt"])
	require.EqualValues(t, 2, b.calls["echo"].Load(), "the forced call ran the operation again")
	again := callTool(t, cs, "echo", map[string]any{"n": 1, "idempotencyKey": "f-1"})
	require.Equal(t, true, again.Meta["idemguard/replayed"])
	require.Nil(t, again.Meta["idemguard/replacesAttempt"])
	require.EqualValues(t, 2, b.calls["echo"].Load())

	bad := callTool(t, cs, "echo", map[string]any{"n": 1, "idempotencyKey": "f-1", "forceNew": "yes"})
	require.True(t, bad.IsError)
	require.EqualValues(t, 2, b.calls["echo"].Load())
}
