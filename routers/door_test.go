package routers

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/tenancy"
)

// chatAnswer is what an openai_chat scope answers: the allowlisted data.
func chatAnswer(text string) idemguard.Response {
	return idemguard.Response{Value: sanitize.Envelope{OK: true, StopReason: sanitize.Completed, Data: map[string]any{
		"text": text, "finish_reason": "stop", "prompt_tokens": json.Number("7"),
		"completion_tokens": json.Number("3"), "total_tokens": json.Number("10"),
	}}, Usage: idemguard.Usage{PromptTokens: 7, CompletionTokens: 3}}
}

// doorSetup is the API with an OpenAI door at /openai/v1: model "fast"
// runs in scope "chat", model "slow" in "chatslow" (which waits for
// releaseNow), every other model is unknown.
func doorSetup(t *testing.T, guard ...func(*idemguard.Config)) (*testBundle, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	var b *testBundle
	b = setup(t, setupOpts{guard: func(c *idemguard.Config) {
		for _, g := range guard {
			g(c)
		}
	}, options: func(o *Options) {
		run := func(ctx context.Context, in json.RawMessage) (any, error) {
			calls.Add(1)
			return chatAnswer("hello " + string(in)), nil
		}
		o.Scopes = append(o.Scopes, Scope{Name: "chat", Run: run,
			Stream: func(ctx context.Context, in json.RawMessage, emit func(idemguard.Chunk)) (any, error) {
				calls.Add(1)
				emit(idemguard.Chunk{Data: []byte(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hel"}}]}`)})
				emit(idemguard.Chunk{Data: []byte(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"lo"}}]}`)})
				return chatAnswer("hello"), nil
			}},
			Scope{Name: "chatslow", Run: func(ctx context.Context, in json.RawMessage) (any, error) {
				b.started <- struct{}{}
				<-b.release
				return run(ctx, in)
			}})
		o.Doors = []Door{{Wire: WireOpenAI, Prefix: "/openai/v1", Models: map[string]string{"fast": "chat", "slow": "chatslow"}}}
	}})
	return b, &calls
}

func (b *testBundle) chat(key, body string, headers ...string) *httptest.ResponseRecorder {
	b.t.Helper()
	if key != "" {
		headers = append(headers, "Idempotency-Key", key)
	}
	return b.do(req{method: http.MethodPost, path: "/openai/v1/chat/completions", body: body, apiKey: acmeKey1, headers: headers})
}

// openAIErrorOf decodes an OpenAI error answer.
func openAIErrorOf(t *testing.T, w *httptest.ResponseRecorder) openAIErrorDetail {
	t.Helper()
	require.Equal(t, "application/json", w.Header().Get("Content-Type"), w.Body.String())
	var e openAIErrorBody
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &e), w.Body.String())
	require.NotEmpty(t, e.Error.Message)
	require.NotEmpty(t, e.Error.Type)
	return e.Error
}

// A plain call answers a chat.completion whose replay is the same bytes,
// marked replayed; the model is the request's and takes no part in the key.
func TestDoorOpenAIPlainReplay(t *testing.T) {
	t.Parallel()
	b, calls := doorSetup(t)
	body := `{"model":"fast","messages":[{"role":"user","content":"hi"}]}`
	first := b.chat("k-1", body)
	require.Equal(t, http.StatusOK, first.Code, first.Body.String())
	second := b.chat("k-1", body)
	require.Equal(t, http.StatusOK, second.Code)
	require.Equal(t, first.Body.String(), second.Body.String())
	require.Empty(t, first.Header().Get("Idempotent-Replayed"))
	require.Equal(t, "true", second.Header().Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, calls.Load())

	var cc chatCompletionBody
	require.NoError(t, json.Unmarshal(first.Body.Bytes(), &cc))
	require.Equal(t, "chat.completion", cc.Object)
	require.Equal(t, "fast", cc.Model)
	require.True(t, strings.HasPrefix(cc.ID, "chatcmpl-"), cc.ID)
	require.NotZero(t, cc.Created)
	require.Equal(t, `hello {"messages":[{"role":"user","content":"hi"}]}`, cc.Choices[0].Message.Content, "the scope gets the body without model")
	require.Equal(t, chatUsage{7, 3, 10}, cc.Usage)
}

// A replay read from the store (no replay cache) renders the same bytes
// as the first answer.
func TestDoorOpenAIStoreReplay(t *testing.T) {
	t.Parallel()
	b, calls := doorSetup(t, func(c *idemguard.Config) { c.ReplayCacheSize = -1 })
	body := `{"model":"fast","messages":[{"role":"user","content":"hi"}]}`
	first := b.chat("k-1", body)
	second := b.chat("k-1", body)
	require.Equal(t, http.StatusOK, second.Code, second.Body.String())
	require.Equal(t, "true", second.Header().Get("Idempotent-Replayed"))
	require.Equal(t, first.Body.String(), second.Body.String())
	require.Contains(t, second.Body.String(), `"total_tokens":10`)
	require.EqualValues(t, 1, calls.Load())
}

// Errors are OpenAI's error object with the pipeline's statuses.
func TestDoorOpenAIErrors(t *testing.T) {
	t.Parallel()
	b, calls := doorSetup(t)
	require.Equal(t, http.StatusOK, b.chat("k-1", `{"model":"fast","messages":[1]}`).Code)

	w := b.chat("k-1", `{"model":"fast","messages":[2]}`)
	require.Equal(t, http.StatusUnprocessableEntity, w.Code)
	e := openAIErrorOf(t, w)
	require.Equal(t, "idempotency_key_reused", e.Code)
	require.Contains(t, e.Message, "different request body")

	w = b.chat("", `{"model":"gpt-unknown","messages":[]}`)
	require.Equal(t, http.StatusNotFound, w.Code)
	e = openAIErrorOf(t, w)
	require.Equal(t, "model", *e.Param)
	require.NotContains(t, w.Body.String(), "gpt-unknown", "the caller's text is not echoed")

	w = b.chat("", `{"messages":[]}`)
	require.Equal(t, http.StatusBadRequest, w.Code)
	e = openAIErrorOf(t, w)
	require.Equal(t, "model", *e.Param)
	require.Equal(t, "invalid_request_error", e.Type)

	w = b.chat("", `{"model":"slow","stream":true,"messages":[1]}`) // chatslow has no Stream
	require.Equal(t, http.StatusBadRequest, w.Code)
	require.Equal(t, "stream", *openAIErrorOf(t, w).Param)

	w = b.do(req{method: http.MethodPost, path: "/openai/v1/chat/completions", body: `{"model":"fast"}`})
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Equal(t, "authentication_error", openAIErrorOf(t, w).Type)
	require.EqualValues(t, 1, calls.Load())
}

// A streamed call answers the scope's chunk events and [DONE]; its replay
// is the same events.
func TestDoorOpenAIStream(t *testing.T) {
	t.Parallel()
	b, calls := doorSetup(t)
	body := `{"model":"fast","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	first := b.chat("s-1", body)
	require.Equal(t, http.StatusOK, first.Code, first.Body.String())
	require.Equal(t, "text/event-stream", first.Header().Get("Content-Type"))
	require.Contains(t, first.Body.String(), `"content":"hel"`)
	require.True(t, strings.HasSuffix(first.Body.String(), "data: [DONE]\n\n"), first.Body.String())
	second := b.chat("s-1", body)
	require.Equal(t, "true", second.Header().Get("Idempotent-Replayed"))
	require.Equal(t, first.Body.String(), second.Body.String())
	require.EqualValues(t, 1, calls.Load())
}

// A duplicate that sends no Prefer: wait waits for the running call and
// gets its answer: an SDK's retry ends with the stored answer, not a 409.
func TestDoorOpenAIDuplicateWaits(t *testing.T) {
	t.Parallel()
	b, calls := doorSetup(t)
	body := `{"model":"slow","messages":[1]}`
	var wg sync.WaitGroup
	answers := make([]*httptest.ResponseRecorder, 2)
	wg.Go(func() { answers[0] = b.chat("d-1", body) })
	<-b.started
	reads := b.gets.Load()
	wg.Go(func() { answers[1] = b.chat("d-1", body) })
	// The duplicate has read the running row: it waits, or has been answered.
	require.Eventually(t, func() bool { return b.gets.Load() > reads }, 10*time.Second, time.Millisecond)
	b.releaseNow()
	wg.Wait()
	for _, a := range answers {
		require.Equal(t, http.StatusOK, a.Code, a.Body.String())
	}
	require.Equal(t, answers[0].Body.String(), answers[1].Body.String())
	require.EqualValues(t, 1, calls.Load())
}

// The door's body scan: the model and the delivery members leave the
// inputs, whatever their spelling or place; everything else stays as sent.
func TestDecodeDoorBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		body, model, inputs string
		stream              bool
	}{
		{`{"model":"m","messages":[1]}`, "m", `{"messages":[1]}`, false},
		{` { "messages" : [ {"model":"inner"} ] , "model" : "m" , "stream" : true } `, "m", `{"messages" : [ {"model":"inner"} ]}`, true},
		{`{"mod\u0065l":"m\"x","stream":null,"stream_options":{"include_usage":true},"t":1.50}`, `m"x`, `{"t":1.50}`, false},
		{`{"a":"}","model":"m","b":[",",{"c":"]"}]}`, "m", `{"a":"}","b":[",",{"c":"]"}]}`, false},
		{`{"model":"m"}`, "m", `{}`, false},
	} {
		in, err := decodeDoorBody([]byte(tc.body))
		require.NoError(t, err, tc.body)
		require.Equal(t, tc.model, in.model, tc.body)
		require.Equal(t, tc.inputs, string(in.inputs), tc.body)
		require.Equal(t, tc.stream, in.stream, tc.body)
		require.True(t, json.Valid(in.inputs), tc.body)
	}
	for body, pointer := range map[string]string{
		`{"messages":[]}`:                "/model",
		`{"model":""}`:                   "/model",
		`{"model":7}`:                    "/model",
		`{"model":"m","stream":"yes"}`:   "/stream",
		`{"model":"m","model":"n"}`:      "",
		`["model"]`:                      "",
		`{"model":"m","mod\u0065l":"n"}`: "",
	} {
		_, err := decodeDoorBody([]byte(body))
		var ie *idemguard.InputError
		if pointer == "" {
			require.ErrorIs(t, err, pipeline.ErrInvalidBody, body)
			continue
		}
		require.ErrorAs(t, err, &ie, body)
		require.Equal(t, pointer, ie.Fields[0].Pointer, body)
	}
}

// chatCompletionOf writes what encoding/json writes for the same object,
// escapes included.
func TestChatCompletionEncoding(t *testing.T) {
	t.Parallel()
	res := idemguard.Result{KeyHash: strings.Repeat("ab", 32), CompletedAt: time.Unix(1767225600, 5), Envelope: sanitize.Envelope{
		Data: map[string]any{"text": "a \"quote\" <b>&</b> \u2028 é\n", "finish_reason": "length",
			"prompt_tokens": json.Number("7"), "completion_tokens": float64(3), "total_tokens": json.Number("10")}}}
	want := pipeline.EncodeJSON(chatCompletionBody{ID: chatCompletionID(res.KeyHash), Object: "chat.completion", Created: 1767225600,
		Model: "m<\">", Choices: []chatChoice{{Message: chatMessage{Role: "assistant", Content: "a \"quote\" <b>&</b> \u2028 é\n"},
			FinishReason: "length"}}, Usage: chatUsage{7, 3, 10}})
	require.Equal(t, string(want), string(chatCompletionOf(res, "m<\">")))
}

// Prefer still works on the door: wait=0 answers a running key at once
// with 409 and Retry-After, in OpenAI's error shape (the SDKs retry it).
// The running call is let finish once the duplicate has read its row: a
// duplicate that waited (the door's default) would get its 200.
func TestDoorOpenAIPreferWaitZero(t *testing.T) {
	t.Parallel()
	b, _ := doorSetup(t)
	body := `{"model":"slow","messages":[1]}`
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { b.chat("p-1", body) })
	<-b.started
	reads := b.gets.Load()
	answer := make(chan *httptest.ResponseRecorder, 1)
	wg.Go(func() { answer <- b.chat("p-1", body, "Prefer", "wait=0") })
	require.Eventually(t, func() bool { return b.gets.Load() > reads }, 10*time.Second, time.Millisecond)
	b.releaseNow()
	w := <-answer
	require.Equal(t, http.StatusConflict, w.Code, w.Body.String())
	require.Equal(t, "1", w.Header().Get("Retry-After"))
	require.Equal(t, "in_progress", openAIErrorOf(t, w).Code)
}

// The Anthropic door: the key from x-api-key, a message object whose
// replay is the same bytes, Anthropic's error object with the pipeline's
// statuses.
func TestDoorAnthropic(t *testing.T) {
	t.Parallel()
	b, calls := doorSetup(t)
	b.opts.Doors = []Door{{Wire: WireAnthropic, Prefix: "/anthropic/v1", Scope: "chat"}}
	h, err := New(b.opts)
	require.NoError(t, err)
	post := func(key, body string, headers ...string) *httptest.ResponseRecorder {
		return mwDo(h, http.MethodPost, "/anthropic/v1/messages", "", key, body, append([]string{"X-Api-Key", acmeKey1}, headers...)...)
	}
	body := `{"model":"claude-x","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`
	first, second := post("a-1", body), post("a-1", body)
	require.Equal(t, http.StatusOK, first.Code, first.Body.String())
	require.Equal(t, first.Body.String(), second.Body.String())
	require.Equal(t, "true", second.Header().Get("Idempotent-Replayed"))
	var m struct {
		ID, Type, Role, Model string
		Content               []struct{ Type, Text string }
		StopReason            string `json:"stop_reason"`
		Usage                 struct {
			In  int `json:"input_tokens"`
			Out int `json:"output_tokens"`
		}
	}
	require.NoError(t, json.Unmarshal(first.Body.Bytes(), &m))
	require.True(t, strings.HasPrefix(m.ID, anthropicIDPrefix), m.ID)
	require.Equal(t, []string{"message", "assistant", "claude-x", "stop"}, []string{m.Type, m.Role, m.Model, m.StopReason})
	require.Equal(t, "text", m.Content[0].Type)
	require.Equal(t, `hello {"max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`, m.Content[0].Text)
	require.Equal(t, [2]int{7, 3}, [2]int{m.Usage.In, m.Usage.Out})
	require.EqualValues(t, 1, calls.Load())

	w := post("a-1", `{"model":"claude-x","max_tokens":9,"messages":[]}`)
	require.Equal(t, http.StatusUnprocessableEntity, w.Code)
	var e anthropicErrorBody
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &e), w.Body.String())
	require.Equal(t, "error", e.Type)
	require.Equal(t, "invalid_request_error", e.Error.Type)
	require.Contains(t, e.Error.Message, "different request body")

	w = post("a-2", body, "X-Api-Key", "wrong-key")
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &e))
	require.Equal(t, "authentication_error", e.Error.Type)
}

// TestDoorKeepsAScopesTenants: a scope limited to some tenants (Scope.Tenants)
// is not there for another tenant through a door either: the model is
// unknown to it, as the scope is on the REST API, and nothing runs.
func TestDoorKeepsAScopesTenants(t *testing.T) {
	t.Parallel()
	b, calls := doorSetup(t)
	for i := range b.opts.Scopes {
		if b.opts.Scopes[i].Name == "chat" {
			b.opts.Scopes[i].Tenants = []tenancy.ID{"acme"}
		}
	}
	var err error
	b.handler, err = New(b.opts)
	require.NoError(t, err)
	body := `{"model":"fast","messages":[{"role":"user","content":"hi"}]}`
	other := b.do(req{method: http.MethodPost, path: "/openai/v1/chat/completions", body: body, apiKey: betaKey,
		headers: []string{"Idempotency-Key", "t-1"}})
	require.Equal(t, http.StatusNotFound, other.Code, other.Body.String())
	require.Equal(t, "unknown_model", openAIErrorOf(t, other).Code)
	require.EqualValues(t, 0, calls.Load(), "nothing ran for another tenant")
	own := b.chat("t-1", body)
	require.Equal(t, http.StatusOK, own.Code, own.Body.String())
	require.EqualValues(t, 1, calls.Load())
}
