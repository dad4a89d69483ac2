package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// A cached replay through the MCP door: what serve's handler stack costs
// for a tool call the guard answers from memory, beside
// BenchmarkHTTPReplayCachedMemstore (the same key on /v1/ops).
func BenchmarkMCPReplayCachedMemstore(b *testing.B) {
	h, _ := newHTTPHandler(b, 0)
	reqs := make([]*replayRequest, replayKeys)
	for n := range replayKeys {
		key, content := "replay-"+strconv.Itoa(n), "replay "+strconv.Itoa(n)
		serveOne(b, h, key, content)
		req := httptest.NewRequest(http.MethodPost, mcpPath, nil)
		setMCPHeaders(req.Header, benchAPIKey)
		body := mcpCallBody(key, content)
		req.ContentLength = int64(len(body))
		reqs[n] = &replayRequest{req: req, body: body}
	}
	w := &bodyWriter{h: http.Header{}}
	loopServe(b, h, reqs, w, func() bool { return w.code == http.StatusOK && bytes.Contains(w.body, mcpReplayed) })
}

// bodyWriter is a ResponseWriter that keeps the status, headers and body.
type bodyWriter struct {
	h    http.Header
	code int
	body []byte
}

func (w *bodyWriter) Header() http.Header { return w.h }
func (w *bodyWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.body = append(w.body, p...)
	return len(p), nil
}
func (w *bodyWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *bodyWriter) reset() { clear(w.h); w.code = 0; w.body = w.body[:0] }
