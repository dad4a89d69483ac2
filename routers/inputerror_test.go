package routers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/ops"
)

// chatCompletion is a fake provider's answer.
const chatCompletion = `{"choices":[{"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

// chatSetup is the API with an openai_chat scope "chat" (max_tokens capped
// at 100) against a fake provider that counts its calls and answers status.
func chatSetup(t *testing.T, status int) (*testBundle, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if status == http.StatusOK {
			_, _ = w.Write([]byte(chatCompletion))
			return
		}
		_, _ = w.Write([]byte(`{"error":{"message":"upstream-body-secret"}}`))
	}))
	t.Cleanup(upstream.Close)
	b := setup(t, setupOpts{options: func(o *Options) {
		o.Scopes = []Scope{{Name: "chat",
			Run:      ops.OpenAIChat(ops.OpenAIConfig{Provider: ops.Provider{BaseURL: upstream.URL, Model: "m", MaxTokens: 100, Client: upstream.Client()}}),
			Validate: ops.ValidateChatInput(100)}}
	}})
	return b, &calls
}

// An input that fails the operation's schema is a 400 naming the field,
// answered before any claim: no row, no upstream call, and the key stays
// free, so the corrected request with the same key runs.
func TestInputErrorsBeforeTheClaim(t *testing.T) {
	t.Parallel()
	b, calls := chatSetup(t, http.StatusOK)
	for name, tc := range map[string]struct {
		body   string
		errors []map[string]any
	}{
		"prompt no messages": {`{"prompt":"hi"}`, []map[string]any{
			{"pointer": "/prompt", "detail": "is not a field of the inputs; the fields are messages, max_tokens, temperature, top_p, seed, stop"},
			{"pointer": "/messages", "detail": `is required: an array of 1 to 256 messages {"role":…,"content":…}`},
		}},
		"empty body": {``, []map[string]any{
			{"pointer": "/messages", "detail": `is required: an array of 1 to 256 messages {"role":…,"content":…}`},
		}},
		"role robot": {`{"messages":[{"role":"robot","content":"hi"}]}`, []map[string]any{
			{"pointer": "/messages/0/role", "detail": "must be one of system, developer, user or assistant"},
		}},
		"model": {`{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}`, []map[string]any{
			{"pointer": "/model", "detail": "is not accepted: the model is set by the server's configuration"},
		}},
		"wrong types": {`{"messages":[{"role":"user","content":1}],"max_tokens":"many"}`, []map[string]any{
			{"pointer": "/max_tokens", "detail": "must be an integer"},
			{"pointer": "/messages/0/content", "detail": "must be a string"},
		}},
		"over the cap": {`{"messages":[{"role":"user","content":"hi"}],"max_tokens":101}`, []map[string]any{
			{"pointer": "/max_tokens", "detail": "must be at most 100 (the configured cap)"},
		}},
		"not an object": {`[1]`, []map[string]any{
			{"pointer": "", "detail": `must be a JSON object: {"messages":[{"role":…,"content":…}], …}`},
		}},
	} {
		for _, key := range []string{"k-" + strings.ReplaceAll(name, " ", "-"), ""} { // a client key, and a derived one
			w := b.post("chat", key, tc.body)
			require.Equal(t, http.StatusBadRequest, w.Code, "%s: %s", name, w.Body.String())
			p := problemOf(t, w)
			require.Equal(t, ProblemTypePrefix+"invalid-input", p["type"], name)
			require.Equal(t, "invalid_input", p["stopReason"], name)
			var got []map[string]any
			raw, err := json.Marshal(p["errors"])
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(raw, &got))
			require.Equal(t, tc.errors, got, name)
			first := tc.errors[0]["pointer"].(string)
			if first == "" {
				first = "the body"
			}
			require.Contains(t, p["detail"], first, "%s: the detail names the field", name)
			require.Nil(t, p["cached"], name)
			require.Empty(t, w.Header().Get("Location"), "%s: a key reference for a key never claimed", name)
		}
	}
	require.Empty(t, b.store.Rows(), "a rejected input created a row")
	require.Zero(t, calls.Load(), "a rejected input reached the upstream")

	// The key was not burnt: the corrected request with it runs.
	w := b.post("chat", "k-role-robot", `{"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.EqualValues(t, 1, calls.Load())
	require.Len(t, b.store.Rows(), 1)
}

// Only the upstream's own rejection is a final 422; the log has its status
// code, never its body.
func TestUpstreamRejectionLogsItsStatus(t *testing.T) {
	t.Parallel()
	b, calls := chatSetup(t, http.StatusBadRequest)
	w := b.post("chat", "u-1", `{"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusUnprocessableEntity, w.Code, w.Body.String())
	require.Equal(t, "invalid_input", problemOf(t, w)["stopReason"])
	require.EqualValues(t, 1, calls.Load())
	failed := b.logs.Lines(t, "guard: operation failed")
	require.Len(t, failed, 1)
	require.EqualValues(t, http.StatusBadRequest, failed[0]["upstream_status"])
	require.NotContains(t, b.logs.String(), "upstream-body-secret")
}

// A validator's own error text may quote the body: it is not shown.
func TestValidateOtherErrorNamesNoValue(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{options: func(o *Options) {
		o.Scopes = []Scope{{Name: "v", Run: func(_ context.Context, in json.RawMessage) (any, error) { return echoResult(in) },
			Validate: func(in json.RawMessage) error { return fmt.Errorf("bad body %s", in) }}}
	}})
	w := b.post("v", "k", `{"secret":"PRIVATE"}`)
	require.Equal(t, http.StatusBadRequest, w.Code)
	p := problemOf(t, w)
	require.Equal(t, "the inputs do not fit the operation's schema: the body does not fit the operation's schema", p["detail"])
	require.NotContains(t, w.Body.String(), "PRIVATE")
	require.Empty(t, b.store.Rows())
}

// The invalid-input problem's names, down to each entry of errors, are the
// document's.
func TestInputProblemMatchesDocument(t *testing.T) {
	t.Parallel()
	props := loadOpenAPI(t)["components"].(yamlMap)["schemas"].(yamlMap)["Problem"].(yamlMap)["properties"].(yamlMap)
	itemProps := props["errors"].(yamlMap)["items"].(yamlMap)["properties"].(yamlMap)
	b, _ := chatSetup(t, http.StatusOK)
	w := b.post("chat", "doc-1", `{"model":"x"}`)
	require.Equal(t, http.StatusBadRequest, w.Code)
	var p map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
	for name := range p {
		require.Contains(t, props, name, "the answer's %q is not in the document's Problem", name)
	}
	entries := p["errors"].([]any)
	require.Len(t, entries, 2)
	for _, e := range entries {
		for name := range e.(map[string]any) {
			require.Contains(t, itemProps, name)
		}
	}
}
