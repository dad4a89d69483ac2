package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/sanitize"
)

const anthropicCanary = "ANTHROPIC-CANARY-5b1"

// fakeAnthropic answers POST /v1/messages as Anthropic does, with the
// canary in the provider's own fields (id, model).
func fakeAnthropic(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if r.URL.Path != "/v1/messages" || r.Header.Get("x-api-key") != "k" || r.Header.Get("anthropic-version") != AnthropicVersion ||
			json.NewDecoder(r.Body).Decode(&req) != nil || req.Model != "claude-test" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if !req.Stream {
			fmt.Fprintf(w, `{"id":"msg_%s","type":"message","role":"assistant","model":"%s","content":[{"type":"text","text":"Hello there"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":4}}`, anthropicCanary, anthropicCanary)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range []string{
			`{"type":"message_start","message":{"id":"msg_` + anthropicCanary + `","type":"message","role":"assistant","model":"` + anthropicCanary + `","content":[],"usage":{"input_tokens":12,"output_tokens":1}}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"ping"}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" there"}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":4}}`,
			`{"type":"message_stop"}`,
		} {
			var typ struct{ Type string }
			_ = json.Unmarshal([]byte(e), &typ)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ.Type, e)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestAnthropicMessages(t *testing.T) {
	t.Parallel()
	srv := fakeAnthropic(t)
	cfg := AnthropicConfig{Provider: Provider{BaseURL: srv.URL + "/v1", Model: "claude-test", APIKey: "k"}}
	inputs := json.RawMessage(`{"max_tokens":64,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`)

	v, err := AnthropicMessages(cfg)(context.Background(), inputs)
	require.NoError(t, err)
	res := v.(idemguard.Response)
	env := res.Value.(sanitize.Envelope)
	require.Equal(t, "Hello there", env.Data["text"])
	require.Equal(t, "end_turn", env.Data["finish_reason"])
	require.Equal(t, idemguard.Usage{PromptTokens: 12, CompletionTokens: 4}, res.Usage)

	var events []idemguard.Chunk
	v, err = AnthropicMessagesStream(cfg)(context.Background(), inputs, func(c idemguard.Chunk) { events = append(events, c) })
	require.NoError(t, err)
	require.Equal(t, env, v.(idemguard.Response).Value, "a plain and a streamed call agree")
	var types []string
	var all strings.Builder
	for _, e := range events {
		types = append(types, e.Type)
		require.True(t, json.Valid(e.Data), string(e.Data))
		all.Write(e.Data)
	}
	require.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}, types)
	require.NotContains(t, all.String(), anthropicCanary)
	replayed := AnthropicReplay(env)
	require.Equal(t, "message_start", replayed[0].Type)
	require.Equal(t, "message_stop", replayed[len(replayed)-1].Type)

	_, err = AnthropicMessages(cfg)(context.Background(), json.RawMessage(`{"messages":[{"role":"system","content":1}]}`))
	var ie *idemguard.InputError
	require.ErrorAs(t, err, &ie)
	require.Len(t, ie.Fields, 3) // role, content, max_tokens
}

// A stream cut short, an error event, or an upstream refusal is never a
// success: provider_error, or the status's stop reason.
func TestAnthropicStreamFailures(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		status int
		events string
		reason sanitize.StopReason
	}{
		"cut short":    {200, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n", sanitize.ProviderError},
		"error event":  {200, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n", sanitize.ProviderError},
		"rate limited": {429, "", sanitize.RateLimited},
		"bad request":  {400, "", sanitize.InvalidInput},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.events)
			}))
			defer srv.Close()
			cfg := AnthropicConfig{Provider: Provider{BaseURL: srv.URL, Model: "m"}}
			_, err := AnthropicMessagesStream(cfg)(context.Background(),
				json.RawMessage(`{"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`), func(idemguard.Chunk) {})
			var oe *idemguard.OpError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, tc.reason, oe.Reason)
		})
	}
}
