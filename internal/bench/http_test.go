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

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/ops"
	"github.com/idemguard/idemguard/routers"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/store/memstore"
	"github.com/idemguard/idemguard/tenancy"
)

// The HTTP path's own CPU cost, without a database: serve's handler stack
// (routers on gin, the bearer-key check, the request log as JSON) over a
// guard on the in-memory store, with the openai_chat operation calling the
// suite's fake upstream on loopback. Profile it with
//
//	go test -run '^$' -bench HTTP -cpuprofile cpu.out ./internal/bench

const benchAPIKey = "bench-api-key-0123456789"

// newHTTPHandler builds the API as serve does (the only place this file
// depends on routers.Options).
func newHTTPHandler(b *testing.B, cacheSize int) (http.Handler, *fakeUpstream) {
	b.Helper()
	up := newFakeUpstream()
	b.Cleanup(up.close)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	g, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: []byte("bench-secret-0123456789abcdef-0123"),
		Logger: log, ReplayCacheSize: cacheSize})
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, g.Close(context.Background())) })
	scopes := []routers.Scope{{Name: httpScope, Run: ops.OpenAIChat(ops.OpenAIConfig{
		BaseURL: up.url(), Model: "bench-model", Client: &http.Client{Transport: loopbackTransport()}})}}
	auth, err := auth.NewAuthenticator(map[tenancy.ID][]string{httpTenant: {auth.HashAPIKey(benchAPIKey)}})
	require.NoError(b, err)
	h, err := routers.New(routers.Options{Guard: g, Scopes: scopes, Auth: auth, Logger: log})
	require.NoError(b, err)
	return h, up
}

func serveOne(b *testing.B, h http.Handler, key, content string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/v1/ops/"+httpScope, bytes.NewReader(chatBody(content)))
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
// from memory (the bench's serve-replay-cached, without the network).
func BenchmarkHTTPReplayCachedMemstore(b *testing.B) {
	h, _ := newHTTPHandler(b, 0)
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
