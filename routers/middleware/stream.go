package middleware

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strings"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/sanitize"
)

// Streamed handlers behind the middleware
//
// A request that accepts text/event-stream is served by the guard's
// streamed form: the handler's server-sent events reach the client as the
// handler flushes them, and are captured, stored and replayed byte for byte
// like a streamed operation's. Each event's JSON data keeps the blocklist of
// the envelope at every depth (a field named prompt, debug, provider, ... is
// dropped wherever it is); data that is not JSON is kept as written. The
// handler's own ids and comments are not kept: every event is sent with the
// guard's id ("<attempt>-<n>"), and a request with Last-Event-ID resumes
// after it, as on the REST API. The
// stored envelope is {ok:true, data:{events:N}}: a plain request for the key
// learns that it completed. A handler that answers with another status or
// content type is answered, stored and replayed as it would be without the
// Accept header; an "error" event, or a handler that ends without writing
// an event, is a retryable failure.

// acceptsEventStream reports whether the request asks for server-sent events.
func acceptsEventStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err == nil && mt == "text/event-stream" {
				return true
			}
		}
	}
	return false
}

// serveStream is Serve for a request that accepts text/event-stream.
func (m *Middleware) serveStream(w http.ResponseWriter, in incoming, next http.Handler) {
	if in.req.WaitApplied {
		w.Header().Set(pipeline.HeaderPreferenceApplied, pipeline.PreferenceApplied(in.req.Wait))
	}
	out := &pipeline.Stream{SSE: pipeline.NewSSE(w)}
	rt := in.route
	rt.Keep = nil // the events are stored as they were sent
	res, err := m.guard.DoStream(in.r.Context(), in.req.Call(in.tenant, rt, in.inputs()), idemguard.StreamOperation{
		Run: func(ctx context.Context, emit func(idemguard.Chunk)) (any, error) {
			cw := &captureWriter{emit: emit, kept: m.headers}
			bw := &bufferedWriter{header: make(http.Header), max: m.limits.MaxBody, capture: cw}
			next.ServeHTTP(bw, in.req.HandlerRequest(ctx, in.r))
			return cw.result(bw)
		}}, out)
	switch {
	case out.Begun:
		if p, failed := pipeline.StreamFailure(res, err); failed {
			_ = out.SSE.Send(pipeline.ErrorEvent(p)) // the handler's own events ended a stream that did not fail
		}
	case err != nil:
		m.answers.Fail(w, in.r, in.route.Scope, err)
	case !ranAnswer(w, res):
		m.answers.Problem(w, pipeline.ResultProblem(res))
	}
}

// captureWriter captures the events of a handler that writes
// text/event-stream with status 200 (bufferedWriter hands it every write
// then): each complete event is emitted, to the client and the stored
// sequence, as it is written. Any other answer is buffered as usual.
type captureWriter struct {
	emit    func(idemguard.Chunk)
	kept    []string // the headers the middleware keeps, for an answer that did not stream
	pending []byte
	events  int
	failed  bool
}

func (c *captureWriter) streaming(w *bufferedWriter) bool {
	mt, _, _ := mime.ParseMediaType(w.header.Get("Content-Type"))
	return mt == "text/event-stream" && (w.status == 0 || w.status == http.StatusOK) && !w.overflow
}

func (c *captureWriter) write(w *bufferedWriter, p []byte) (int, error) {
	w.status = http.StatusOK
	c.pending = append(c.pending, p...)
	for {
		i := bytes.Index(c.pending, []byte("\n\n"))
		if i < 0 {
			return len(p), nil
		}
		block := c.pending[:i]
		c.pending = c.pending[i+2:]
		if e, ok := parseEventBlock(block); ok {
			if e.Type == "error" {
				c.failed = true
				continue
			}
			c.emit(e)
			c.events++
		}
	}
}

func (c *captureWriter) result(w *bufferedWriter) (any, error) {
	if !c.streaming(w) || w.streamed != "" {
		// Stored as the envelope even where the route keeps its own JSON
		// (Options.Keep): the call did not know it would not stream.
		return w.result(false, c.kept)
	}
	if c.failed || c.events == 0 {
		return nil, &idemguard.OpError{Reason: sanitize.ProviderError, Err: errors.New("the handler's event stream failed or held no event")}
	}
	return sanitize.Envelope{OK: true, StopReason: sanitize.Completed, Data: map[string]any{"events": c.events}}, nil
}

// parseEventBlock reads one event (its "event:" and "data:" fields; comments
// and ids are not kept) and applies the blocklist to JSON data.
func parseEventBlock(block []byte) (idemguard.Chunk, bool) {
	var e idemguard.Chunk
	var data []string
	for _, line := range strings.Split(strings.ReplaceAll(string(block), "\r", ""), "\n") {
		switch {
		case strings.HasPrefix(line, "event:"):
			e.Type = strings.TrimPrefix(strings.TrimPrefix(line, "event:"), " ")
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if data == nil {
		return e, false
	}
	e.Data = withoutBlocked([]byte(strings.Join(data, "\n")))
	return e, true
}

// withoutBlocked drops the blocklisted members of a JSON document at every
// depth; anything that is not a JSON object or array is returned as it is.
func withoutBlocked(b []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() {
		return b
	}
	switch v.(type) {
	case map[string]any, []any:
	default:
		return b
	}
	if !dropBlocked(v) {
		return b
	}
	return pipeline.EncodeJSON(v)
}

// dropBlocked removes blocked keys in place and reports whether it removed any.
func dropBlocked(v any) bool {
	dropped := false
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if sanitize.IsBlockedKey(k) {
				delete(t, k)
				dropped = true
				continue
			}
			dropped = dropBlocked(x) || dropped
		}
	case []any:
		for _, x := range t {
			dropped = dropBlocked(x) || dropped
		}
	}
	return dropped
}
