package routers

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/idemguard/idemguard/internal/ops"
	"github.com/idemguard/idemguard/internal/reqlog"
)

// benchUpstream is an OpenAI chat stream answered in memory: one content
// chunk, the finish reason, the usage and [DONE], without a network.
type benchUpstream struct{}

const benchUpstreamStream = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n" +
	"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
	"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6}}\n\n" +
	"data: [DONE]\n\n"

func (benchUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(benchUpstreamStream)), Request: r}, nil
}

// BenchmarkStreamFirstEvent is a fresh streamed POST /v1/ops/:scope of the
// openai_chat operation through the API as serve wires it (request log,
// metrics), over the memory store and an upstream answered in memory: what
// the handler chain, the guard and the operation cost a streamed call of a
// short answer, in allocations (time to first event is most of it).
func BenchmarkStreamFirstEvent(b *testing.B) {
	h := streamBenchHandler(b)
	body := []byte(`{"messages":[{"role":"user","content":"stream 7"}],"stream":true}`)
	req := httptest.NewRequest(http.MethodPost, "/v1/ops/chat", nil)
	req.Header.Set("Authorization", "Bearer "+acmeKey1)
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = int64(len(body))
	rd := bytes.NewReader(body)
	w := &flushDiscard{discardWriter{h: http.Header{}}}
	key := make([]byte, 0, 32)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		i++
		key = strconv.AppendInt(append(key[:0], "stream-"...), int64(i), 10)
		req.Header["Idempotency-Key"] = []string{string(key)}
		rd.Reset(body)
		req.Body = io.NopCloser(rd)
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, req)
		if w.code != http.StatusOK || w.h.Get("Content-Type") != "text/event-stream" {
			b.Fatalf("status %d %v", w.code, w.h)
		}
	}
}

// flushDiscard is a discardWriter that can be flushed, as a stream needs.
type flushDiscard struct{ discardWriter }

func (*flushDiscard) Flush() {}

// streamBenchHandler is the API as serve wires it, over the memory store,
// with the scope chat streamed by the openai_chat operation.
func streamBenchHandler(b *testing.B) http.Handler {
	g, a, m := benchAPI(b)
	oc := ops.OpenAIConfig{Provider: ops.Provider{BaseURL: "http://upstream.invalid/v1", Model: "bench-model",
		Client: &http.Client{Transport: benchUpstream{}}}}
	h, err := New(Options{Guard: g, Auth: a, Logger: slog.New(reqlog.NewJSONHandler(io.Discard)), HTTPMetrics: m,
		Limits: Limits{Tenant: Limit{Concurrent: -1, Jobs: -1, Rate: -1}},
		Scopes: []Scope{{Name: "chat", Run: ops.OpenAIChat(oc), Stream: ops.OpenAIChatStream(oc), StreamReplay: ops.OpenAIChatReplay}}})
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// BenchmarkDeliveryMode is the delivery members taken out of a chat body
// that asks for a stream.
func BenchmarkDeliveryMode(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"stream 7"}],"temperature":0.2,"stream":true,"stream_options":{"include_usage":true}}`)
	b.Run("TakeCanonical", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, err := deliveryMode(body); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("maps", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok, err := deliveryModeByMaps(body); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
	})
}
