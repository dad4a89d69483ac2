package ops_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/ops"
	"github.com/idemguard/idemguard/sanitize"
)

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

func runStream(t *testing.T, srv *httptest.Server) ([]idemguard.Chunk, any, error) {
	t.Helper()
	f := ops.OpenAIChatStream(ops.OpenAIConfig{BaseURL: srv.URL + "/v1", Model: "gpt-test", APIKey: apiKey})
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
	f := ops.OpenAIChatStream(ops.OpenAIConfig{BaseURL: srv.URL, Model: "gpt-test", APIKey: apiKey, Client: &http.Client{Transport: tr}})
	for range 3 {
		_, err := f(context.Background(), chatInputs, func(idemguard.Chunk) {})
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, dialed.Load(), "connections dialed for 3 streams one after another")
}
