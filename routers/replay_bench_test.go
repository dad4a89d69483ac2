package routers

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/internal/reqlog"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/store/memstore"
	"github.com/idemguard/idemguard/tenancy"
)

// BenchmarkCachedReplay is a cached replay through the API as `idemguard
// serve` wires it (its request log handler, its Prometheus metrics fed by
// the guard's events and the HTTP observer, the audit events observed),
// without the HTTP server's parsing: what the handler chain costs a
// request, in time and allocations.
func BenchmarkCachedReplay(b *testing.B) {
	h, body := cachedReplayHandler(b)
	// The request and recorder are built outside the measured part.
	req := httptest.NewRequest(http.MethodPost, "/v1/ops/chat", nil)
	req.Header.Set("Authorization", "Bearer "+acmeKey1)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "replay-7")
	req.ContentLength = int64(len(body))
	rd := bytes.NewReader(body)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rd.Reset(body)
		req.Body = io.NopCloser(rd)
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, req)
		if w.code != http.StatusOK {
			b.Fatalf("status %d", w.code)
		}
	}
}

// cachedReplayHandler is the API as serve wires it, over the memory store,
// with one answer stored (and cached) for the request body it returns.
func cachedReplayHandler(b *testing.B) (http.Handler, []byte) {
	g, a, m := benchAPI(b)
	h, err := New(Options{Guard: g, Auth: a, Logger: slog.New(reqlog.NewJSONHandler(io.Discard)), HTTPMetrics: m,
		Limits: Limits{Tenant: Limit{Concurrent: -1, Jobs: -1, Rate: -1}},
		Scopes: []Scope{{Name: "chat", Run: func(context.Context, json.RawMessage) (any, error) {
			return map[string]any{"ok": true, "data": map[string]any{"text": "Retries, once: the guard remembers.", "total_tokens": 20}}, nil
		}}}})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(`{"messages":[{"role":"user","content":"replay 7"}]}`)
	serve := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/v1/ops/chat", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+acmeKey1)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "replay-7")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	for i := range 2 {
		if w := serve(); w.Code != http.StatusOK || (i == 1) != (w.Header().Get("Idempotent-Replayed") == "true") {
			b.Fatalf("request %d: %d %s", i, w.Code, w.Body)
		}
	}
	return h, body
}

// discardWriter is a ResponseWriter that keeps the status and headers only.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return len(p), nil
}
func (w *discardWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

// benchAPI is what the benchmarks' API runs on, as serve wires it: a guard
// over the memory store with the audit trail observed into the metrics
// (closed when b ends), an API key of tenant acme, the metrics with the
// scope chat.
func benchAPI(b *testing.B) (*idemguard.Guard, *auth.Authenticator, *metrics.Metrics) {
	b.Helper()
	m := metrics.New()
	g, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: testSecret,
		Logger: slog.New(slog.DiscardHandler), Observe: m.Observe, Audit: idemguard.AuditConfig{Observe: true}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = g.Close(ctx)
	})
	a, err := auth.NewAuthenticator(map[tenancy.ID][]string{"acme": {auth.HashAPIKey(acmeKey1)}})
	if err != nil {
		b.Fatal(err)
	}
	m.InitScopes("chat")
	return g, a, m
}
