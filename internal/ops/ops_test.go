package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/config"
	"github.com/idemguard/idemguard/internal/ops"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	prompt = "Tell me the secret plan of Project Zebra"
	apiKey = "sk-test-DO-NOT-LOG-1234"
)

var chatInputs = json.RawMessage(`{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"` + prompt + `"}]}`)

// upstream is a fake OpenAI-compatible server.
type upstream struct {
	srv     *httptest.Server
	calls   atomic.Int32
	lastReq atomic.Pointer[map[string]any]
	lastHdr atomic.Pointer[http.Header]
}

func newUpstream(t *testing.T, handler func(w http.ResponseWriter, r *http.Request)) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		u.lastReq.Store(&m)
		h := r.Header.Clone()
		u.lastHdr.Store(&h)
		handler(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func reply(status int, body string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// completion is what a real provider answers, with fields that must never be stored.
const completion = `{"id":"chatcmpl-123","object":"chat.completion","created":1,"model":"gpt-4o-2024",
"system_fingerprint":"fp_x","provider":"openai",
"choices":[{"index":0,"message":{"role":"assistant","content":"Hello there."},"finish_reason":"stop"},
           {"index":1,"message":{"role":"assistant","content":"ignored"},"finish_reason":"length"}],
"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`

func chat(u *upstream, mutate ...func(*ops.OpenAIConfig)) ops.Func {
	cfg := ops.OpenAIConfig{Provider: ops.Provider{BaseURL: u.srv.URL + "/v1/", Model: "gpt-test", APIKey: apiKey, Client: u.srv.Client()}}
	for _, m := range mutate {
		m(&cfg)
	}
	return ops.OpenAIChat(cfg)
}

func requireReason(t *testing.T, err error, want sanitize.StopReason) {
	t.Helper()
	var oe *idemguard.OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, want, oe.Reason, "err: %v", err)
	require.NotContains(t, err.Error(), prompt)
	require.NotContains(t, err.Error(), apiKey)
}

func TestOpenAIChatMapsTheCompletion(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, reply(200, completion))
	v, err := chat(u, func(c *ops.OpenAIConfig) { c.MaxTokens = 64 })(context.Background(), chatInputs)
	require.NoError(t, err)

	req := *u.lastReq.Load()
	require.Equal(t, "gpt-test", req["model"])
	require.EqualValues(t, 64, req["max_tokens"], "the cap is sent when the request sets none")
	require.Len(t, req["messages"], 2)
	hdr := *u.lastHdr.Load()
	require.Equal(t, "Bearer "+apiKey, hdr.Get("Authorization"))
	require.Equal(t, "application/json", hdr.Get("Content-Type"))
	require.Equal(t, []string{"application/json"}, hdr.Values("Accept"))

	resp, ok := v.(*idemguard.Response)
	require.True(t, ok, "%T", v)
	require.Equal(t, idemguard.Usage{PromptTokens: 12, CompletionTokens: 3}, resp.Usage, "the usage is stored with the answer")
	env, err := sanitize.FromValue(resp.Value)
	require.NoError(t, err)
	require.True(t, env.OK)
	require.Equal(t, sanitize.Completed, env.StopReason)
	require.Equal(t, map[string]any{
		"text": "Hello there.", "finish_reason": "stop",
		"prompt_tokens": json.Number("12"), "completion_tokens": json.Number("3"), "total_tokens": json.Number("15"),
	}, env.Data)
	body, err := sanitize.Marshal(env)
	require.NoError(t, err)
	for _, forbidden := range []string{"gpt-", "chatcmpl", "openai", "fp_x", prompt, "be brief", apiKey} {
		require.NotContains(t, string(body), forbidden)
	}
}

func TestOpenAIChatPath(t *testing.T) {
	t.Parallel()
	var path atomic.Value
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { path.Store(r.URL.Path); reply(200, completion)(w, r) })
	_, err := chat(u)(context.Background(), chatInputs)
	require.NoError(t, err)
	require.Equal(t, "/v1/chat/completions", path.Load())
}

func TestOpenAIChatStatusMapping(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		want   sanitize.StopReason
	}{
		{429, sanitize.RateLimited},
		{500, sanitize.ProviderError},
		{502, sanitize.ProviderError},
		{503, sanitize.ProviderError},
		{400, sanitize.InvalidInput},
		{404, sanitize.InvalidInput},
		{422, sanitize.InvalidInput},
		{401, sanitize.ProviderError},
		{403, sanitize.ProviderError},
		{408, sanitize.Timeout},
		{409, sanitize.ProviderError},
	}
	for _, tc := range cases {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			t.Parallel()
			// The body echoes the prompt, as some providers' errors do.
			u := newUpstream(t, reply(tc.status, `{"error":{"message":"bad: `+prompt+`"}}`))
			_, err := chat(u)(context.Background(), chatInputs)
			requireReason(t, err, tc.want)
			var se *ops.StatusError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tc.status, se.StatusCode)
		})
	}
}

func TestOpenAIChatUnusableAnswers(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"not json":   `<html>oops</html>`,
		"no choices": `{"choices":[],"usage":{}}`,
		"array":      `[1,2]`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := newUpstream(t, reply(200, body))
			_, err := chat(u)(context.Background(), chatInputs)
			requireReason(t, err, sanitize.ProviderError)
		})
	}
}

func TestOpenAIChatNullContent(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, reply(200, `{"choices":[{"message":{"content":null},"finish_reason":"tool_calls"}]}`))
	v, err := chat(u)(context.Background(), chatInputs)
	require.NoError(t, err)
	env, err := sanitize.FromValue(v.(*idemguard.Response).Value)
	require.NoError(t, err)
	require.Equal(t, "", env.Data["text"])
	require.Equal(t, "tool_calls", env.Data["finish_reason"])
}

func TestOpenAIChatTransportErrors(t *testing.T) {
	t.Parallel()
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		u := newUpstream(t, reply(200, completion))
		f := chat(u)
		u.srv.Close()
		_, err := f(context.Background(), chatInputs)
		requireReason(t, err, sanitize.ProviderError)
	})
	t.Run("own timeout", func(t *testing.T) {
		t.Parallel()
		u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		start := time.Now()
		_, err := chat(u, func(c *ops.OpenAIConfig) { c.Timeout = 50 * time.Millisecond })(context.Background(), chatInputs)
		requireReason(t, err, sanitize.Timeout)
		require.Less(t, time.Since(start), 5*time.Second)
	})
	// The caller's deadline, later than the operation's timeout, leaves
	// the timeout its own; an earlier one is the caller's to classify.
	t.Run("own timeout before the caller's deadline", func(t *testing.T) {
		t.Parallel()
		u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		_, err := chat(u, func(c *ops.OpenAIConfig) { c.Timeout = 50 * time.Millisecond })(ctx, chatInputs)
		requireReason(t, err, sanitize.Timeout)
		require.Less(t, time.Since(start), 5*time.Second)
	})
	t.Run("caller's deadline before the own timeout", func(t *testing.T) {
		t.Parallel()
		u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := chat(u, func(c *ops.OpenAIConfig) { c.Timeout = time.Minute })(ctx, chatInputs)
		var oe *idemguard.OpError
		require.False(t, errors.As(err, &oe), "the guard classifies its own deadline: %v", err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
	t.Run("caller's context ends", func(t *testing.T) {
		t.Parallel()
		u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(50*time.Millisecond, func() { cancel(idemguard.ErrShuttingDown) })
		_, err := chat(u)(ctx, chatInputs)
		var oe *idemguard.OpError
		require.False(t, errors.As(err, &oe), "the guard classifies its own cancellation: %v", err)
		require.ErrorIs(t, err, idemguard.ErrShuttingDown)
	})
}

func TestOpenAIChatRejectsBadInputsWithoutCalling(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, reply(200, completion))
	f := chat(u, func(c *ops.OpenAIConfig) { c.MaxTokens = 100 })
	for name, in := range map[string]string{
		"not an object":   `"` + prompt + `"`,
		"no messages":     `{"messages":[]}`,
		"bad role":        `{"messages":[{"role":"wizard","content":"` + prompt + `"}]}`,
		"model override":  `{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}`,
		"content type":    `{"messages":[{"role":"user","content":42}]}`,
		"over the cap":    `{"messages":[{"role":"user","content":"hi"}],"max_tokens":101}`,
		"zero max_tokens": `{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := f(context.Background(), json.RawMessage(in))
			requireReason(t, err, sanitize.InvalidInput)
		})
	}
	require.Zero(t, u.calls.Load())

	_, err := f(context.Background(), json.RawMessage(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":100,"temperature":0.2,"top_p":1,"seed":7,"stop":["\n"]}`))
	require.NoError(t, err)
	req := *u.lastReq.Load()
	require.EqualValues(t, 100, req["max_tokens"])
	require.EqualValues(t, 0.2, req["temperature"])
	require.EqualValues(t, 7, req["seed"])
}

func TestOpenAIChatThroughTheGuard(t *testing.T) {
	t.Parallel()
	g, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: []byte(strings.Repeat("k", 32))})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
	run := func(f ops.Func, key string, timeout time.Duration) idemguard.Result {
		res, err := g.Do(context.Background(), idemguard.Call{Tenant: "t", Scope: "chat", ClientKey: key,
			Inputs: chatInputs, Timeout: timeout}, func(ctx context.Context) (any, error) { return f(ctx, chatInputs) })
		require.NoError(t, err)
		return res
	}

	ok := newUpstream(t, reply(200, completion))
	res := run(chat(ok), "k1", 0)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.Equal(t, 200, res.StatusCode)
	require.JSONEq(t, `{"ok":true,"stopReason":"completed","needsHuman":false,"cached":false,
		"data":{"text":"Hello there.","finish_reason":"stop","prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`, string(res.Body))

	limited := newUpstream(t, reply(429, `{}`))
	res = run(chat(limited), "k2", 0)
	require.Equal(t, idemguard.StatusFailed, res.Status)
	require.Equal(t, sanitize.RateLimited, res.StopReason)

	slow := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	res = run(chat(slow), "k3", 100*time.Millisecond)
	require.Equal(t, sanitize.Timeout, res.StopReason, "the guard's own timeout is a timeout, not a provider_error")
}

func TestHTTPJSON(t *testing.T) {
	t.Parallel()
	inputs := json.RawMessage(`{"question_hash":"abc","n":1}`)
	newOp := func(u *upstream) ops.Func {
		return ops.HTTPJSON(ops.HTTPJSONConfig{URL: u.srv.URL + "/op", Headers: map[string]string{"X-Api-Token": "tok"}, Client: u.srv.Client()})
	}

	t.Run("envelope answer", func(t *testing.T) {
		t.Parallel()
		u := newUpstream(t, reply(200, `{"ok":false,"stopReason":"needs_human","needsHuman":true,"model":"x",
			"data":{"answer":"a","debug":"d","nested":{"prompt":"p"}}}`))
		v, err := newOp(u)(context.Background(), inputs)
		require.NoError(t, err)
		require.Equal(t, map[string]any{"question_hash": "abc", "n": float64(1)}, *u.lastReq.Load(), "the inputs are posted unchanged")
		require.Equal(t, "tok", (*u.lastHdr.Load()).Get("X-Api-Token"))
		env, err := sanitize.FromValue(v)
		require.NoError(t, err)
		require.Equal(t, sanitize.Envelope{OK: false, StopReason: sanitize.NeedsHuman, NeedsHuman: true, Data: map[string]any{"answer": "a"}}, env)
	})
	t.Run("plain object becomes data", func(t *testing.T) {
		t.Parallel()
		u := newUpstream(t, reply(200, `{"answer":"42","score":0.5,"model":"m"}`))
		v, err := newOp(u)(context.Background(), inputs)
		require.NoError(t, err)
		env, err := sanitize.FromValue(v)
		require.NoError(t, err)
		require.Equal(t, sanitize.Envelope{OK: true, StopReason: sanitize.Completed,
			Data: map[string]any{"answer": "42", "score": json.Number("0.5")}}, env)
	})
	t.Run("not an object", func(t *testing.T) {
		t.Parallel()
		u := newUpstream(t, reply(200, `[1]`))
		_, err := newOp(u)(context.Background(), inputs)
		requireReason(t, err, sanitize.ProviderError)
	})
	t.Run("status mapping", func(t *testing.T) {
		t.Parallel()
		for status, want := range map[int]sanitize.StopReason{429: sanitize.RateLimited, 500: sanitize.ProviderError, 400: sanitize.InvalidInput} {
			u := newUpstream(t, reply(status, `{}`))
			_, err := newOp(u)(context.Background(), inputs)
			requireReason(t, err, want)
		}
	})
}

func TestDemo(t *testing.T) {
	t.Parallel()
	f := ops.Demo(10 * time.Millisecond)
	a, err := f(context.Background(), json.RawMessage(`{"b":1,"a":"`+prompt+`"}`))
	require.NoError(t, err)
	b, err := f(context.Background(), json.RawMessage("{ \"a\" : \""+prompt+"\",\n\"b\":1 }"))
	require.NoError(t, err)
	require.Equal(t, a, b, "the same inputs in another order or spacing get the same answer")
	c, err := f(context.Background(), json.RawMessage(`{"a":"other"}`))
	require.NoError(t, err)
	require.NotEqual(t, a, c)

	env, err := sanitize.FromValue(a)
	require.NoError(t, err)
	require.True(t, env.OK)
	require.Contains(t, env.Data["text"], "Demo answer ")
	require.Contains(t, env.Data, "completion_tokens")
	body, err := sanitize.Marshal(env)
	require.NoError(t, err)
	require.NotContains(t, string(body), "Zebra", "the inputs are never echoed")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errs := make(chan error, 1)
	go func() {
		_, err := ops.Demo(time.Hour)(ctx, json.RawMessage(`{}`))
		errs <- err
	}()
	select {
	case err = <-errs:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(30 * time.Second): // generous: the delay is an hour
		t.Fatal("a cancelled demo operation did not return")
	}
}

func TestFromConfig(t *testing.T) {
	t.Parallel()
	c := &config.Config{
		OpenAI:   config.OpenAI{BaseURL: "http://127.0.0.1:1/v1", Model: "m", Timeout: 7 * time.Second},
		Upstream: config.Upstream{URL: "http://127.0.0.1:1/u", Timeout: 3 * time.Second},
		Scopes: []config.Scope{
			{Name: "chat", Operation: config.OpOpenAIChat, KeyRequired: true, Settings: idemguard.Settings{MaxAttempts: 2}},
			{Name: "json", Operation: config.OpHTTPJSON, Timeout: time.Second},
			{Name: "demo", Operation: config.OpDemo, Delay: time.Millisecond},
		},
	}
	r, err := ops.FromConfig(c, nil, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"chat", "demo", "json"}, r.Names())
	s, ok := r.Lookup("chat")
	require.True(t, ok)
	require.True(t, s.KeyRequired)
	require.Equal(t, 7*time.Second, s.Timeout, "openai.timeout is the default")
	require.Equal(t, 2, s.Settings.MaxAttempts)
	s, _ = r.Lookup("json")
	require.Equal(t, time.Second, s.Timeout, "the scope's own timeout wins")
	s, _ = r.Lookup("demo")
	require.Zero(t, s.Timeout)
	_, err = s.Run(context.Background(), json.RawMessage(`{}`))
	require.NoError(t, err)

	c.Scopes = append(c.Scopes, config.Scope{Name: "x", Operation: "nope"})
	_, err = ops.FromConfig(c, nil, nil)
	require.ErrorContains(t, err, `unknown operation "nope"`)
}

// TestNewTransportReusesConnections: serve's upstream transport keeps the
// connections of concurrent calls for the next calls. On a transport that
// keeps 2 idle connections per host (http.DefaultTransport), every round of
// 16 concurrent calls after the first dials 14 new connections.
func TestNewTransportReusesConnections(t *testing.T) {
	t.Parallel()
	const inFlight, rounds = 16, 3
	var dialed atomic.Int32
	arrived := make(chan struct{}, inFlight)
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		<-release // every call of the round is in flight at once, each on its own connection
		reply(200, completion)(w, r)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	tr := ops.NewTransport()
	defer tr.CloseIdleConnections()
	run := ops.OpenAIChat(ops.OpenAIConfig{Provider: ops.Provider{BaseURL: srv.URL, Model: "m", Client: &http.Client{Transport: tr}}})

	for round := range rounds {
		errs := make(chan error, inFlight)
		for range inFlight {
			go func() { _, err := run(context.Background(), chatInputs); errs <- err }()
		}
		for range inFlight {
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: not every call reached the upstream", round)
			}
		}
		for range inFlight {
			release <- struct{}{}
		}
		for range inFlight {
			require.NoError(t, <-errs)
		}
	}
	// A connection goes back to the idle pool just after its answer is read,
	// so a call of the next round may dial before one is back: allow a few.
	require.LessOrEqual(t, int(dialed.Load()), inFlight+4,
		"connections dialed for %d rounds of %d concurrent calls", rounds, inFlight)
}

const streamCanary = "CANARY-stream-42"

// streamUpstream answers with the given SSE lines and records the request.
func streamUpstream(t *testing.T, status int, lines ...string) (*httptest.Server, *string) {
	t.Helper()
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = string(b)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(status)
		for _, l := range lines {
			fmt.Fprint(w, l+"\n\n")
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

func chunk(extra string) string {
	return `data: {"id":"chatcmpl-` + streamCanary + `","model":"gpt-` + streamCanary + `","system_fingerprint":"fp_` + streamCanary + `",` + extra + `}`
}

var wholeStream = []string{
	": keep-alive comment",
	chunk(`"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":{"x":"` + streamCanary + `"},"finish_reason":null}]`),
	chunk(`"choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]`),
	chunk(`"choices":[{"index":0,"delta":{"content":" <there>."},"finish_reason":null}]`),
	chunk(`"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]`),
	chunk(`"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}`),
	"data: [DONE]",
}

// A streamed call sends the API key, its JSON body and Accept on every
// call of the operation (the header is built once, when the operation is).
func TestOpenAIChatStreamSendsItsHeaders(t *testing.T) {
	t.Parallel()
	var hdrs []http.Header
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hdrs = append(hdrs, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		for _, l := range wholeStream {
			fmt.Fprint(w, l+"\n\n")
		}
	}))
	t.Cleanup(srv.Close)
	for range 2 {
		_, _, err := runStream(t, srv)
		require.NoError(t, err)
	}
	require.Len(t, hdrs, 2)
	for _, h := range hdrs {
		require.Equal(t, []string{"Bearer " + apiKey}, h.Values("Authorization"))
		require.Equal(t, []string{"application/json"}, h.Values("Content-Type"))
		require.Equal(t, []string{"text/event-stream"}, h.Values("Accept"))
	}
}

func runStream(t *testing.T, srv *httptest.Server) ([]idemguard.Chunk, any, error) {
	t.Helper()
	f := ops.OpenAIChatStream(ops.OpenAIConfig{Provider: ops.Provider{BaseURL: srv.URL + "/v1", Model: "gpt-test", APIKey: apiKey}})
	var events []idemguard.Chunk
	v, err := f(context.Background(), chatInputs, func(e idemguard.Chunk) { events = append(events, e) })
	return events, v, err
}

// Every event is built from the role, content delta, finish reason and
// usage only: decoding the whole upstream chunk (or relaying its bytes)
// lets the canary in id, model, system_fingerprint or logprobs through.
func TestOpenAIChatStreamBuildsEventsFromAllowlistedFieldsOnly(t *testing.T) {
	t.Parallel()
	srv, req := streamUpstream(t, 200, wholeStream...)
	events, v, err := runStream(t, srv)
	require.NoError(t, err)
	require.Contains(t, *req, `"stream":true`)
	require.Contains(t, *req, `"include_usage":true`)
	var got []string
	for _, e := range events {
		require.Empty(t, e.Type)
		require.NotContains(t, string(e.Data), streamCanary)
		got = append(got, string(e.Data))
	}
	require.Equal(t, []string{
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}]}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" \u003cthere\u003e."},"finish_reason":null}]}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`{"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`,
	}, got)

	env, err := sanitize.FromValue(v)
	require.NoError(t, err)
	body, err := sanitize.Marshal(env)
	require.NoError(t, err)
	require.NotContains(t, string(body), streamCanary)
	require.Equal(t, "Hello <there>.", env.Data["text"], "the assembled answer is what a plain call stores")

	replay := ops.OpenAIChatReplay(env)
	require.Len(t, replay, 3)
	require.Equal(t, `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello \u003cthere\u003e."},"finish_reason":null}]}`, string(replay[0].Data))
	require.Equal(t, got[3:], []string{string(replay[1].Data), string(replay[2].Data)})
}

// A stream cut short, one without a finish reason, a malformed chunk and an
// upstream error status are failures, never a success.
func TestOpenAIChatStreamFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
		lines  []string
		reason sanitize.StopReason
	}{
		{"cut before [DONE]", 200, wholeStream[:3], sanitize.ProviderError},
		{"no finish reason", 200, append(append([]string{}, wholeStream[:3]...), "data: [DONE]"), sanitize.ProviderError},
		{"malformed chunk", 200, []string{"data: {not json " + streamCanary, "data: [DONE]"}, sanitize.ProviderError},
		{"rate limited", 429, nil, sanitize.RateLimited},
		{"server error", 503, nil, sanitize.ProviderError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, _ := streamUpstream(t, tc.status, tc.lines...)
			_, v, err := runStream(t, srv)
			require.Nil(t, v)
			var oe *idemguard.OpError
			require.True(t, errors.As(err, &oe), "err %v", err)
			require.Equal(t, tc.reason, oe.Reason)
			require.NotContains(t, err.Error(), streamCanary)
			require.NotContains(t, err.Error(), prompt)
		})
	}
}

// The line buffer starts small and grows: a chunk longer than its first
// size is read whole, one longer than MaxStreamLineBytes is a
// provider_error.
func TestOpenAIChatStreamLongLines(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 200<<10)
	srv, _ := streamUpstream(t, 200, chunk(`"choices":[{"index":0,"delta":{"content":"`+long+`"},"finish_reason":"stop"}]`), "data: [DONE]")
	events, v, err := runStream(t, srv)
	require.NoError(t, err)
	require.Len(t, events, 2)
	require.Contains(t, string(events[0].Data), long)
	require.Equal(t, long, v.(sanitize.Envelope).Data["text"])

	over := strings.Repeat("x", ops.MaxStreamLineBytes)
	srv, _ = streamUpstream(t, 200, chunk(`"choices":[{"index":0,"delta":{"content":"`+over+`"},"finish_reason":"stop"}]`), "data: [DONE]")
	_, v, err = runStream(t, srv)
	require.Nil(t, v)
	var oe *idemguard.OpError
	require.True(t, errors.As(err, &oe), "err %v", err)
	require.Equal(t, sanitize.ProviderError, oe.Reason)
}

// The streamed demo gives the same answer as the plain one, word by word.
func TestDemoStreamMatchesDemo(t *testing.T) {
	t.Parallel()
	in := []byte(`{"messages":[{"role":"user","content":"hi"}]}`)
	plain, err := ops.Demo(0)(context.Background(), in)
	require.NoError(t, err)
	var events []idemguard.Chunk
	v, err := ops.DemoStream(0)(context.Background(), in, func(e idemguard.Chunk) { events = append(events, e) })
	require.NoError(t, err)
	pe, err := sanitize.FromValue(plain)
	require.NoError(t, err)
	se, err := sanitize.FromValue(v)
	require.NoError(t, err)
	require.Equal(t, pe, se)
	require.Greater(t, len(events), 5)
	require.Equal(t, ops.OpenAIChatReplay(se)[1:], events[len(events)-2:], "the finish and usage chunks are the replay's")
}

// A stream read to [DONE] gives its connection back for the next stream,
// also when the upstream ends its body a moment after [DONE] (a separate
// write, as most servers send it): the operation reads the body to its end
// before closing it. Closed at [DONE], the connection was dropped and every
// stream dialed (and, against a provider, handshook TLS) again: this test
// counted 3 connections for 3 streams.
func TestOpenAIChatStreamKeepsTheUpstreamConnection(t *testing.T) {
	t.Parallel()
	var dialed atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, l := range wholeStream {
			fmt.Fprint(w, l+"\n\n")
		}
		_ = http.NewResponseController(w).Flush()
		// The body's end follows [DONE] a moment later, unless the client
		// hung up first.
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Millisecond):
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	tr := ops.NewTransport()
	t.Cleanup(tr.CloseIdleConnections)
	f := ops.OpenAIChatStream(ops.OpenAIConfig{Provider: ops.Provider{BaseURL: srv.URL, Model: "gpt-test", APIKey: apiKey, Client: &http.Client{Transport: tr}}})
	for range 3 {
		_, err := f(context.Background(), chatInputs, func(idemguard.Chunk) {})
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, dialed.Load(), "connections dialed for 3 streams one after another")
}
