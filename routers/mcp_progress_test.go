package routers

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/mcptest"
	"github.com/idemguard/idemguard/internal/testkeys"
	"github.com/idemguard/idemguard/progress"
)

// progressCanary is a stage outside the steps scope's allowlist.
const progressCanary = "CANARY-stage-5e1d"

// stepsScope is an async scope whose job reports 4 steps (the second with
// a stage outside its allowlist) and takes the next only once acks says
// the last was seen.
func stepsScope(acks <-chan int64) Scope {
	stages := []string{"reading", progressCanary, "writing", "writing"}
	return Scope{Name: "steps", Async: true,
		Settings: idemguard.Settings{StaleAfter: idemguard.MinStaleAfter, ProgressStages: []string{"reading", "writing"}}, // a heartbeat every 100ms
		Run: func(ctx context.Context, in json.RawMessage) (any, error) {
			for i, stage := range stages {
				progress.Report(ctx, progress.Update{Done: int64(i + 1), Total: int64(len(stages)), Stage: stage})
				for seen := int64(0); seen < int64(i+1); {
					select {
					case seen = <-acks:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
			}
			return echoResult(in)
		}}
}

// TestMCPJobProgress: following a job with idemguard_job_status and a
// progressToken, the client gets each progress of the job as an MCP
// progress notification, in order, before the result (the job takes its
// next step only once the client saw the last): numbers, and the stage
// when it is on the allowlist; the canary stage reaches no notification,
// result or log. Without a progressToken none is sent.
func TestMCPJobProgress(t *testing.T) {
	t.Parallel()
	acks := make(chan int64, 16)
	b := setup(t, setupOpts{options: func(o *Options) {
		o.MCPPath, o.MaxWait = "/mcp", 10*time.Second
		o.Scopes = append(o.Scopes, stepsScope(acks))
	}})
	srv := httptest.NewServer(b.handler)
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	var got []*mcp.ProgressNotificationParams
	cs, err := mcptest.ConnectWith(t, srv.URL+"/mcp", map[string]string{"Authorization": "Bearer " + acmeKey1}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			got = append(got, req.Params)
			mu.Unlock()
			acks <- int64(req.Params.Progress)
		}})
	require.NoError(t, err)
	follow := func(ref string, token any) *mcp.CallToolResult {
		started := callTool(t, cs, "steps", map[string]any{"n": 1, "idempotencyKey": ref})
		require.False(t, started.IsError, "%v", started.Content)
		if token == nil { // the test's own watcher acknowledges the steps
			w, err := b.guard.Watch(context.Background(), testkeys.Client(t, b.guard, "acme", "steps", ref), "")
			require.NoError(t, err)
			t.Cleanup(w.Close)
			go ackEachProgress(w, acks)
		}
		params := &mcp.CallToolParams{Name: "idemguard_job_status", Arguments: map[string]any{"scope": "steps", "ref": ref, "wait": 10}}
		if token != nil {
			params.SetProgressToken(token)
		}
		res, err := cs.CallTool(context.Background(), params)
		require.NoError(t, err)
		require.False(t, res.IsError, "%v", res.Content)
		require.Equal(t, "succeeded", mcptest.Structured(t, res)["status"], "the job completed within the wait")
		return res
	}

	res := follow("progress-1", "tok-1")
	mu.Lock()
	notes := slices.Clone(got)
	mu.Unlock()
	requireStepNotes(t, notes, "tok-1")
	raw, err := json.Marshal(res)
	require.NoError(t, err)
	require.NotContains(t, string(raw), progressCanary)

	follow("progress-2", nil) // without a progressToken
	mu.Lock()
	require.Len(t, got, 4, "no notification without a progressToken")
	mu.Unlock()
	require.False(t, strings.Contains(b.logs.String(), progressCanary), "the canary stage is in a log")
}

// requireStepNotes checks the four notifications of a steps job followed
// with token: in order, numbers, the allowlisted stages, no canary.
func requireStepNotes(t *testing.T, notes []*mcp.ProgressNotificationParams, token string) {
	t.Helper()
	require.Len(t, notes, 4)
	for i, n := range notes {
		require.Equal(t, token, n.ProgressToken)
		require.Equal(t, float64(i+1), n.Progress)
		require.Equal(t, float64(4), n.Total)
		require.Equal(t, []string{"reading", "", "writing", "writing"}[i], n.Message)
		raw, err := json.Marshal(n)
		require.NoError(t, err)
		require.NotContains(t, string(raw), progressCanary)
	}
}

// ackEachProgress sends acks the Done of each progress event w reports.
func ackEachProgress(w *idemguard.Watcher, acks chan<- int64) {
	for {
		e, err := w.Next(context.Background())
		if err != nil {
			return
		}
		if e.Kind == idemguard.EventProgress {
			acks <- e.Info.Progress.Done
		}
	}
}
