package ops_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/ops"
	"github.com/idemguard/idemguard/internal/progresshook"
	"github.com/idemguard/idemguard/progress"
)

// reports collects what an operation reports through its context.
func reports() (context.Context, func() []progress.Update) {
	var mu sync.Mutex
	var got []progress.Update
	ctx := progresshook.With(context.Background(), progresshook.Func(func(done, total int64, stage string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, progress.Update{Done: done, Total: total, Stage: stage})
	}))
	return ctx, func() []progress.Update { mu.Lock(); defer mu.Unlock(); return got }
}

// The demo operation reports its 10 steps, in order, with the stages of
// its scope's allowlist.
func TestDemoReportsItsSteps(t *testing.T) {
	t.Parallel()
	ctx, got := reports()
	_, err := ops.Demo(20*time.Millisecond)(ctx, json.RawMessage(`{"a":1}`))
	require.NoError(t, err)
	require.Len(t, got(), ops.DemoSteps)
	for i, u := range got() {
		require.Equal(t, int64(i+1), u.Done)
		require.Equal(t, int64(ops.DemoSteps), u.Total)
		require.Contains(t, ops.DemoStages, u.Stage)
	}
	require.Equal(t, "writing", got()[ops.DemoSteps-1].Stage)
}

// A streamed upstream call reports the content deltas received so far:
// numbers only, no total, no stage, never the text.
func TestOpenAIChatStreamReportsTokensReceived(t *testing.T) {
	t.Parallel()
	srv, _ := streamUpstream(t, 200, wholeStream...)
	ctx, got := reports()
	f := ops.OpenAIChatStream(ops.OpenAIConfig{Provider: ops.Provider{BaseURL: srv.URL + "/v1", Model: "gpt-test", APIKey: apiKey}})
	_, err := f(ctx, chatInputs, func(idemguard.Chunk) {})
	require.NoError(t, err)
	require.Equal(t, []progress.Update{{Done: 1}, {Done: 2}}, got())
}
