package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/testdb"
)

// claudeModel is the configured upstream model: it must never be stored
// or answered.
const claudeModel = "claude-fake-SECRET-MODEL"

// anthropicLLM is a fake Anthropic upstream: POST /v1/messages, plain or
// streamed, with sdkCanary in the provider's own fields (id, model). gate,
// when set, holds each call until it is closed.
type anthropicLLM struct {
	srv      *httptest.Server
	calls    atomic.Int32
	gate     atomic.Pointer[chan struct{}]
	gateFrom atomic.Int32 // the first call number gate holds (0: every call)
}

func newAnthropicLLM(t *testing.T) *anthropicLLM {
	t.Helper()
	f := &anthropicLLM{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if r.URL.Path != "/v1/messages" || json.NewDecoder(r.Body).Decode(&req) != nil || req.Model != claudeModel {
			http.Error(w, `{"type":"error"}`, http.StatusBadRequest)
			return
		}
		n := f.calls.Add(1)
		if gate := f.gate.Load(); gate != nil && n >= f.gateFrom.Load() {
			select {
			case <-*gate:
			case <-r.Context().Done():
				return
			}
		}
		if !req.Stream {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"msg_%s","type":"message","role":"assistant","model":"%s","content":[{"type":"text","text":"Heron launches in May."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":21,"output_tokens":6}}`, sdkCanary, sdkCanary)
			return
		}
		write := eventStream(w)
		for _, e := range []string{
			`{"type":"message_start","message":{"id":"msg_` + sdkCanary + `","type":"message","role":"assistant","model":"` + sdkCanary + `","content":[],"usage":{"input_tokens":21,"output_tokens":1}}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"w0 "}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"w1 "}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}`,
			`{"type":"message_stop"}`,
		} {
			var typ struct{ Type string }
			_ = json.Unmarshal([]byte(e), &typ)
			write("event: %s\ndata: %s\n\n", typ.Type, e)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// anthropicService is a production service whose Anthropic door
// (/anthropic/v1) runs every model in the anthropic_messages scope "claude".
func anthropicService(t *testing.T, db *testdb.Database, llm *anthropicLLM) *service {
	return startService(t, productionEnv(db.DSN), fmt.Sprintf(
		"anthropic: {base_url: %q, model: %q, timeout: 20s}\nstore_timeout: 2s\nscopes:\n  - {name: claude, operation: anthropic_messages}\n"+
			"doors:\n  - {wire: anthropic, prefix: /anthropic/v1, scope: claude}\n", llm.srv.URL+"/v1", claudeModel))
}

// The anthropic-sdk-go SDK, unmodified: the same call twice with one key
// runs once, the second replayed and equal; a stream read with the SDK's
// reader replays the same text; another body under the key is the SDK's
// 422 error; two calls of one key at once run once and both succeed; the
// upstream's private fields and model reach no row, log or answer.
func TestSDKAnthropicGo(t *testing.T) {
	t.Parallel()
	db := database(t)
	llm := newAnthropicLLM(t)
	s := anthropicService(t, db, llm)
	client := anthropic.NewClient(aoption.WithBaseURL(s.url("/anthropic/")), aoption.WithAPIKey(acmeKey))
	params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}}
	ctx := context.Background()
	key := func(k string) aoption.RequestOption { return aoption.WithHeader("Idempotency-Key", k) }

	var r1, r2 *http.Response
	m1, err := client.Messages.New(ctx, params, key("a-plain-1"), aoption.WithResponseInto(&r1))
	require.NoError(t, err)
	m2, err := client.Messages.New(ctx, params, key("a-plain-1"), aoption.WithResponseInto(&r2))
	require.NoError(t, err)
	require.EqualValues(t, 1, llm.calls.Load())
	require.Equal(t, "Heron launches in May.", m1.Content[0].Text)
	require.Equal(t, "claude-sonnet-4-5", string(m1.Model))
	require.EqualValues(t, 6, m1.Usage.OutputTokens)
	require.Equal(t, m1.RawJSON(), m2.RawJSON(), "a replay is the same bytes")
	require.Empty(t, r1.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "true", r2.Header.Get("Idempotent-Replayed"))
	requireNoClaudeSecret(t, m2.RawJSON())
	requireAvoidedTokens(t, s, "claude", 21, 6) // Anthropic's usage feeds the same metric

	other := params
	other.Messages = []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("another question"))}
	_, err = client.Messages.New(ctx, other, key("a-plain-1"))
	var apiErr *anthropic.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusUnprocessableEntity, apiErr.StatusCode)
	require.Contains(t, apiErr.Error(), "different request body")

	first := anthropicStreamText(t, client, params, "a-stream-1")
	require.Equal(t, "w0 w1 ", first)
	require.Equal(t, first, anthropicStreamText(t, client, params, "a-stream-1"))
	require.EqualValues(t, 2, llm.calls.Load())

	anthropicConcurrent(t, client, params, llm)
	rows := dumpRows(t, db)
	for _, secret := range []string{sdkCanary, claudeModel, prompt} {
		require.NotContains(t, rows, secret)
		require.NotContains(t, s.logs.String(), secret)
	}
}

func anthropicStreamText(t *testing.T, client anthropic.Client, params anthropic.MessageNewParams, key string) string {
	t.Helper()
	st := client.Messages.NewStreaming(context.Background(), params, aoption.WithHeader("Idempotency-Key", key))
	var text strings.Builder
	for st.Next() {
		ev := st.Current()
		requireNoClaudeSecret(t, ev.RawJSON())
		if ev.Type == "content_block_delta" {
			text.WriteString(ev.Delta.Text)
		}
	}
	require.NoError(t, st.Err())
	require.NoError(t, st.Close())
	return text.String()
}

// anthropicConcurrent: two calls of one key at once, the second sent
// while the first holds the upstream: one upstream call, both succeed.
func anthropicConcurrent(t *testing.T, client anthropic.Client, params anthropic.MessageNewParams, llm *anthropicLLM) {
	t.Helper()
	params.Messages = []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt + " (concurrent)"))}
	concurrentPair(t, &llm.calls, &llm.gate, func(ctx context.Context) (string, error) {
		m, err := client.Messages.New(ctx, params, aoption.WithHeader("Idempotency-Key", "a-concurrent-1"))
		if err != nil {
			return "", err
		}
		return m.RawJSON(), nil
	})
}

func requireNoClaudeSecret(t *testing.T, answer string) {
	t.Helper()
	for _, secret := range []string{sdkCanary, claudeModel, prompt} {
		require.NotContains(t, answer, secret)
	}
}
