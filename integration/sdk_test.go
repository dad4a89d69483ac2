package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	db := database(t)
	llm := newSDKLLM(t)
	s := sdkService(t, db, llm)
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
