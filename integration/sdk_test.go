package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/testdb"
)

// The providers' official SDKs, unmodified, against the built binary's
// provider doors: only the SDK's base URL (and the tenant's API key as its
// key) changes.

// sdkCanary is in every private field of the fake upstream's answers (its
// id, system_fingerprint): it must reach no row, log or answer.
const sdkCanary = "SDK-CANARY-41d9"

// sdkLLM is the fake upstream of the SDK tests: a plain answer or a stream
// (as the request asks), each carrying sdkCanary in the provider's own
// fields. gate, when set, holds each call from gateFrom on until it is
// closed.
type sdkLLM struct {
	*fakeLLM
	gate     atomic.Pointer[chan struct{}]
	gateFrom atomic.Int32 // the first call number gate holds (0: every call)
}

func newSDKLLM(t *testing.T) *sdkLLM {
	f := &sdkLLM{fakeLLM: newFakeLLM(t)}
	streamed := &streamLLM{n: 3}
	f.set(func(n int32, w http.ResponseWriter, r *http.Request) {
		if gate := f.gate.Load(); gate != nil && n >= f.gateFrom.Load() {
			select {
			case <-*gate:
			case <-r.Context().Done():
				return
			}
		}
		if r.Header.Get("Accept") == "text/event-stream" {
			streamed.behave(n, w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-%s","object":"chat.completion","model":%q,"system_fingerprint":"fp_%s",
"choices":[{"index":0,"message":{"role":"assistant","content":"Heron launches in May."},"finish_reason":"stop"}],
"usage":{"prompt_tokens":21,"completion_tokens":6,"total_tokens":27}}`, sdkCanary, model, sdkCanary)
	})
	return f
}

// sdkService is a production service whose OpenAI door (/openai/v1) runs
// every model in the openai_chat scope "chat".
func sdkService(t *testing.T, db *testdb.Database, llm *sdkLLM) *service {
	return startService(t, productionEnv(db.DSN), chatConfig(llm.fakeLLM, "  - {name: chat, operation: openai_chat}\n",
		"doors:\n  - {wire: openai, prefix: /openai/v1, scope: chat}\n"))
}

// newOpenAIDoor is sdkService on a new database and a new fake upstream.
func newOpenAIDoor(t *testing.T) (*testdb.Database, *sdkLLM, *service) {
	db, llm := database(t), newSDKLLM(t)
	return db, llm, sdkService(t, db, llm)
}

// requireNoCanary: the upstream's private fields and the prompt are in no
// row and no log line.
func requireNoCanary(t *testing.T, db *testdb.Database, s *service) {
	t.Helper()
	rows := dumpRows(t, db)
	require.NotContains(t, rows, sdkCanary)
	require.NotContains(t, rows, streamCanary)
	require.NotContains(t, rows, prompt)
	require.NotContains(t, rows, model)
	logs := s.logs.String()
	for _, secret := range []string{sdkCanary, streamCanary, prompt, model} {
		require.NotContains(t, logs, secret)
	}
}

func TestSDKOpenAIGo(t *testing.T) {
	t.Parallel()
	db, llm, s := newOpenAIDoor(t)
	client := openai.NewClient(option.WithBaseURL(s.url("/openai/v1/")), option.WithAPIKey(acmeKey))
	params := openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
	ctx := context.Background()

	// The same call twice: one upstream call, equal objects, the second replayed.
	var r1, r2 *http.Response
	c1, err := client.Chat.Completions.New(ctx, params, option.WithHeader("Idempotency-Key", "go-plain-1"), option.WithResponseInto(&r1))
	require.NoError(t, err)
	c2, err := client.Chat.Completions.New(ctx, params, option.WithHeader("Idempotency-Key", "go-plain-1"), option.WithResponseInto(&r2))
	require.NoError(t, err)
	require.EqualValues(t, 1, llm.calls.Load())
	require.Equal(t, "Heron launches in May.", c1.Choices[0].Message.Content)
	require.Equal(t, "gpt-4o-mini", c1.Model)
	require.EqualValues(t, 27, c1.Usage.TotalTokens)
	require.Equal(t, c1.RawJSON(), c2.RawJSON(), "a replay is the same bytes")
	require.Empty(t, r1.Header.Get("Idempotent-Replayed"))
	require.Equal(t, "true", r2.Header.Get("Idempotent-Replayed"))
	requireNoSecretIn(t, c2.RawJSON())
	requireAvoidedTokens(t, s, "chat", 21, 6) // the replay's usage, as any replay's

	// A different body under the same key: the SDK's 422 error, readable.
	other := params
	other.Messages = []openai.ChatCompletionMessageParamUnion{openai.UserMessage("another question")}
	_, err = client.Chat.Completions.New(ctx, other, option.WithHeader("Idempotency-Key", "go-plain-1"))
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, http.StatusUnprocessableEntity, apiErr.StatusCode)
	require.Contains(t, apiErr.Message, "different request body")
	require.EqualValues(t, 1, llm.calls.Load())

	// A stream read with the SDK's reader, then replayed: the same text.
	first := streamText(t, client, params, "go-stream-1")
	require.Equal(t, "w0 w1 w2 ", first)
	require.Equal(t, first, streamText(t, client, params, "go-stream-1"))
	require.EqualValues(t, 2, llm.calls.Load())

	sdkConcurrent(t, client, params, llm)
	requireNoCanary(t, db, s)
}

// sdkConcurrent: two calls of one key at once, the second sent while the
// first holds the upstream: one upstream call, both succeed (the door
// waits for the running call).
func sdkConcurrent(t *testing.T, client openai.Client, params openai.ChatCompletionNewParams, llm *sdkLLM) {
	t.Helper()
	params.Messages = []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt + " (concurrent)")}
	concurrentPair(t, &llm.calls, &llm.gate, func(ctx context.Context) (string, error) {
		c, err := client.Chat.Completions.New(ctx, params, option.WithHeader("Idempotency-Key", "go-concurrent-1"))
		if err != nil {
			return "", err
		}
		return c.RawJSON(), nil
	})
}

// concurrentPair runs call twice at once, the second sent (its request
// written) once the first holds the upstream behind gate: both succeed
// with the same answer, and the upstream was called once.
func concurrentPair(t *testing.T, calls *atomic.Int32, gate *atomic.Pointer[chan struct{}], call func(context.Context) (string, error)) {
	t.Helper()
	g := make(chan struct{})
	gate.Store(&g)
	defer gate.Store(nil)
	before := calls.Load()
	var wg sync.WaitGroup
	answers, errs := make([]string, 2), make([]error, 2)
	wg.Go(func() { answers[0], errs[0] = call(context.Background()) })
	eventually(t, 10*time.Second, "the first call reaches the upstream", func() bool { return calls.Load() > before })
	sent := make(chan struct{})
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(sent) }})
	wg.Go(func() { answers[1], errs[1] = call(ctx) })
	<-sent
	close(g)
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, answers[0], answers[1])
	require.Equal(t, before+1, calls.Load())
}

func streamText(t *testing.T, client openai.Client, params openai.ChatCompletionNewParams, key string) string {
	t.Helper()
	st := client.Chat.Completions.NewStreaming(context.Background(), params, option.WithHeader("Idempotency-Key", key))
	var text strings.Builder
	for st.Next() {
		chunk := st.Current()
		requireNoSecretIn(t, chunk.RawJSON())
		for _, c := range chunk.Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	require.NoError(t, st.Err())
	require.NoError(t, st.Close())
	return text.String()
}

// requireNoSecretIn: an answer carries none of the provider's private
// fields, its model id or the prompt.
func requireNoSecretIn(t *testing.T, answer string) {
	t.Helper()
	for _, secret := range []string{sdkCanary, streamCanary, model, prompt} {
		require.NotContains(t, answer, secret)
	}
}

// requireAvoidedTokens: the replays so far saved prompt and completion
// tokens in all (the avoided-tokens metric of scope).
func requireAvoidedTokens(t *testing.T, s *service, scope string, prompt, completion int) {
	t.Helper()
	resp, err := newClient(t).Get(s.url("/metrics"))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, prompt, metricValue(t, string(body), `idemguard_avoided_tokens_total{kind="prompt",scope="`+scope+`"}`))
	require.Equal(t, completion, metricValue(t, string(body), `idemguard_avoided_tokens_total{kind="completion",scope="`+scope+`"}`))
}

// Two replicas on one database, the same key sent to each through the
// OpenAI door with the official SDK, the second once the first holds the
// upstream: one upstream call, and both calls get the same answer (the
// second replica's duplicate waits by reading the row, or, if it reads it
// only after the first committed, replays it: the assertions hold either
// way, as the one-call rule must).
func TestSDKOpenAIAcrossReplicas(t *testing.T) {
	t.Parallel()
	db := database(t)
	llm := newSDKLLM(t)
	gate := make(chan struct{})
	llm.gate.Store(&gate)
	replicas := []*service{sdkService(t, db, llm), sdkService(t, db, llm)}
	params := openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
	var wg sync.WaitGroup
	answers := make([]*openai.ChatCompletion, 2)
	errs := make([]error, 2)
	call := func(ctx context.Context, i int) {
		client := openai.NewClient(option.WithBaseURL(replicas[i].url("/openai/v1/")), option.WithAPIKey(acmeKey))
		answers[i], errs[i] = client.Chat.Completions.New(ctx, params, option.WithHeader("Idempotency-Key", "replicas-1"))
	}
	wg.Go(func() { call(context.Background(), 0) })
	eventually(t, 10*time.Second, "the first call reaches the upstream", func() bool { return llm.calls.Load() == 1 })
	sent := make(chan struct{})
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(sent) }})
	wg.Go(func() { call(ctx, 1) })
	<-sent
	close(gate)
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, answers[0].RawJSON(), answers[1].RawJSON())
	require.EqualValues(t, 1, llm.calls.Load())
}

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
// newAnthropicDoor is anthropicService on a new database and a new fake
// upstream.
func newAnthropicDoor(t *testing.T) (*testdb.Database, *anthropicLLM, *service) {
	db, llm := database(t), newAnthropicLLM(t)
	return db, llm, anthropicService(t, db, llm)
}

func TestSDKAnthropicGo(t *testing.T) {
	t.Parallel()
	db, llm, s := newAnthropicDoor(t)
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
