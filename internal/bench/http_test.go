package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/config"
	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/internal/ops"
	"github.com/idemguard/idemguard/internal/reqlog"
	"github.com/idemguard/idemguard/routers"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/store/memstore"
	"github.com/idemguard/idemguard/tenancy"
)

// The HTTP path's own CPU cost, without a database: serve's handler stack
// (routers on gin, the bearer-key check, the request log as JSON, the
// Prometheus metrics fed by the guard's events and the HTTP middleware, the
// audit trail stored as serve stores it by default) over a guard on the
// in-memory store, with the openai_chat operation calling the suite's fake
// upstream on loopback. Profile it with
//
//	go test -run '^$' -bench HTTP -cpuprofile cpu.out ./internal/bench

const benchAPIKey = "bench-api-key-0123456789"

// newHTTPHandler builds the API as serve does (the only place this file
// depends on routers.Options).
func newHTTPHandler(b *testing.B, cacheSize int) (http.Handler, *fakeUpstream) {
	b.Helper()
	up := newFakeUpstream()
	b.Cleanup(up.close)
	log := slog.New(reqlog.NewJSONHandler(io.Discard)) // serve's handler
	m := metrics.New()
	m.InitScopes(httpScope)
	observe := func(ev idemguard.Event) { // serve's observer, without the stats recorder's database
		m.Observe(ev)
		if ev.Kind == idemguard.EventReplayed {
			m.AvoidedCall(ev.Scope, ev.Usage.PromptTokens, ev.Usage.CompletionTokens, 0)
		}
	}
	g, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: []byte("bench-secret-0123456789abcdef-0123"),
		Logger: log, ReplayCacheSize: cacheSize, Observe: observe, Audit: idemguard.AuditConfig{Observe: true, Store: true}})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, g.Close(context.Background())) })
	scopes := benchScopes(b, up.url())
	auth, err := auth.NewAuthenticator(map[tenancy.ID][]string{httpTenant: {auth.HashAPIKey(benchAPIKey)}})
	require.NoError(b, err)
	// The limits checked as serve checks them, with a rate the loop never
	// reaches (a cached replay takes a token of the request rate).
	limits := routers.Limits{Tenant: routers.Limit{Rate: 1e9, Burst: 1e9}}
	h, err := routers.New(routers.Options{Guard: g, Scopes: scopes, Auth: auth, Logger: log, Metrics: m.Handler(), HTTPMetrics: m,
		Limits: limits, MCPPath: mcpPath, Doors: []routers.Door{{Wire: routers.WireOpenAI, Prefix: "/openai/v1", Scope: httpScope}}})
	require.NoError(b, err)
	return h, up
}

// benchScopes are the scopes serve builds from serveConfig's openai
// section and scope (ops.FromConfig, made routers scopes as serve makes
// them): the operation, its validation before the claim, its stream, and
// the timeout it gives both the scope and the operation; with the upstream
// API key serveCmd gives serve.
func benchScopes(b *testing.B, upstream string) []routers.Scope {
	b.Helper()
	cfg := &config.Config{
		OpenAI: config.OpenAI{BaseURL: upstream, Model: "bench-model", APIKey: "bench-upstream-key", Timeout: 30 * time.Second},
		Scopes: []config.Scope{{Name: httpScope, Operation: config.OpOpenAIChat}},
	}
	reg, err := ops.FromConfig(cfg, &http.Client{Transport: loopbackTransport()}, nil)
	require.NoError(b, err)
	s, ok := reg.Lookup(httpScope)
	require.True(b, ok)
	return []routers.Scope{{Name: s.Name, Settings: s.Settings, KeyRequired: s.KeyRequired, Timeout: s.Timeout,
		Run: s.Run, Validate: s.Validate, Stream: s.Stream, StreamReplay: s.StreamReplay,
		Isolation: routers.Isolation(s.Isolation), Tenants: s.Tenants, Async: s.Async, InputSchema: s.InputSchema}}
}

func serveOne(b *testing.B, h http.Handler, key, content string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/v1/ops/"+httpScope, bytes.NewReader(chatBody("", content)))
	req.Header.Set("Authorization", "Bearer "+benchAPIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		b.Fatalf("status %d: %s", w.Code, w.Body)
	}
	return w
}

func BenchmarkHTTPFreshMemstore(b *testing.B) {
	h, _ := newHTTPHandler(b, 0)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n++
		serveOne(b, h, "fresh-"+strconv.Itoa(n), "fresh "+strconv.Itoa(n))
	}
}

func BenchmarkHTTPReplayStoreMemstore(b *testing.B) {
	h, _ := newHTTPHandler(b, -1)
	for n := range replayKeys {
		serveOne(b, h, "replay-"+strconv.Itoa(n), "replay "+strconv.Itoa(n))
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n = (n + 1) % replayKeys
		if w := serveOne(b, h, "replay-"+strconv.Itoa(n), "replay "+strconv.Itoa(n)); w.Header().Get("Idempotent-Replayed") != "true" {
			b.Fatal("not a replay")
		}
	}
}

// A cached replay: what serve's handler stack costs when the guard answers
// from memory (the bench's serve-replay-cached, without the network). The
// requests are built once and their bodies rewound, and the answer goes to
// a writer that keeps only its status and headers, so that the figures are
// the handler's, not the harness's.
func BenchmarkHTTPReplayCachedMemstore(b *testing.B) { benchReplayCached(b, "/v1/ops/"+httpScope) }

// The same cached replays through the OpenAI door: the door's decoding and
// its chat.completion rendering on top of the same call.
func BenchmarkHTTPDoorReplayCachedMemstore(b *testing.B) { benchReplayCached(b, doorPath) }

func benchReplayCached(b *testing.B, path string) {
	h, _ := newHTTPHandler(b, 0)
	reqs := make([]*replayRequest, replayKeys)
	for n := range replayKeys {
		key, content := "replay-"+strconv.Itoa(n), "replay "+strconv.Itoa(n)
		serveOne(b, h, key, content)
		reqs[n] = newReplayRequest(path, key, content)
	}
	w := &headerWriter{h: http.Header{}}
	loopServe(b, h, reqs, w, func() bool { return w.code == http.StatusOK && w.h.Get("Idempotent-Replayed") == "true" })
}

// loopServe serves reqs in turn for the benchmark's loop, to w (reset
// before each), and fails unless replayed says the answer is a replay. It
// reports the allocations and the process's CPU per operation.
func loopServe(b *testing.B, h http.Handler, reqs []*replayRequest, w interface {
	http.ResponseWriter
	reset()
}, replayed func() bool) {
	b.ReportAllocs()
	cpu := processCPU()
	n := 0
	for b.Loop() {
		n = (n + 1) % len(reqs)
		w.reset()
		h.ServeHTTP(w, reqs[n].rewound())
		if !replayed() {
			b.Fatal("not a replay")
		}
	}
	reportCPU(b, cpu)
}

// reportCPU reports the process's CPU time since cpu per operation
// (cpu-ns/op: the garbage collector's and the background writers' share
// included), steadier than ns/op on a busy machine.
func reportCPU(b *testing.B, cpu time.Duration) {
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// replayRequest is one request sent again and again.
type replayRequest struct {
	req  *http.Request
	body []byte
	rd   bytes.Reader
}

func newReplayRequest(path, key, content string) *replayRequest {
	body := chatBody(path, content)
	req := httptest.NewRequest(http.MethodPost, path, nil)
	req.Header.Set("Authorization", "Bearer "+benchAPIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.ContentLength = int64(len(body))
	return &replayRequest{req: req, body: body}
}

// rewound is the request with its body at the start.
func (r *replayRequest) rewound() *http.Request {
	r.rd.Reset(r.body)
	r.req.Body = io.NopCloser(&r.rd)
	return r.req
}

// headerWriter is a ResponseWriter that keeps the status and headers and
// discards the body.
type headerWriter struct {
	h    http.Header
	code int
}

func (w *headerWriter) Header() http.Header         { return w.h }
func (w *headerWriter) Write(p []byte) (int, error) { w.WriteHeader(http.StatusOK); return len(p), nil }
func (w *headerWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *headerWriter) reset() { clear(w.h); w.code = 0 }
