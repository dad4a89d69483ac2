package middleware

import (
	"bytes"
	"context"
	"errors"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/eventdata"
	"github.com/idemguard/idemguard/internal/testhooks"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/sanitize"
)

// Streamed handlers behind the middleware
//
// A request that accepts text/event-stream is served by the guard's
// streamed form: the handler's server-sent events reach the client as the
// handler flushes them, and are captured, stored and replayed byte for byte
// like a streamed operation's (each read by internal/eventdata, as the
// simulation's streamed events are). Each event's JSON data keeps the
// blocklist of the envelope at every depth (a field named prompt, debug, provider, ... is
// dropped wherever it is), in every JSON document the event holds (several
// data lines may hold one each); the removed members are counted like
// those of any answer (Result.DroppedFields, EventDroppedField). Data that
// is not JSON is kept as written, unless it could hide a document the
// blocklist cannot read: that event is refused (left out). The handler's
// own ids and comments are not kept: every event is sent with the guard's
// id ("<attempt>-<execution>-<n>"), and a request with Last-Event-ID resumes after it,
// as on the REST API. The
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
	out := pipeline.NewStream(w, nil)
	rt := in.route
	rt.Keep = nil // the events are stored as they were sent
	res, err := m.guard.DoStream(in.r.Context(), in.req.Call(in.tenant, rt, in.inputs()), idemguard.StreamOperation{
		Run: func(ctx context.Context, emit func(idemguard.Chunk)) (any, error) {
			cw := &captureWriter{emit: emit, kept: m.headers, defect: testhooks.GuardDefect(m.guard)}
			bw := &bufferedWriter{header: make(http.Header), max: m.limits.MaxBody, capture: cw}
			next.ServeHTTP(bw, in.req.HandlerRequest(ctx, in.r))
			return cw.result(bw)
		}}, out)
	switch {
	case out.Begun:
		if p, failed := pipeline.StreamFailure(res, err); failed {
			_ = out.SSE.Send(m.answers.ErrorEvent(p)) // the handler's own events ended a stream that did not fail
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
	dropped []string // the blocked members removed from events (and refused events)
	defect  testhooks.Defect
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
		e, dropped, refused, ok := eventdata.Parse(block, c.defect)
		c.noteDropped(dropped)
		switch {
		case !ok || refused:
		case e.Type == "error":
			c.failed = true
		default:
			c.emit(e)
			c.events++
		}
	}
}

// noteDropped keeps the names of removed members, each once, at most
// maxDroppedNames of them.
func (c *captureWriter) noteDropped(names []string) {
	for _, name := range names {
		if len(c.dropped) < maxDroppedNames && !slices.Contains(c.dropped, name) {
			c.dropped = append(c.dropped, name)
		}
	}
}

// maxDroppedNames bounds the names a stream reports (Result.DroppedFields
// keeps at most 64).
const maxDroppedNames = 64

func (c *captureWriter) result(w *bufferedWriter) (any, error) {
	if !c.streaming(w) || w.streamed != "" {
		// Stored as the envelope even where the route keeps its own JSON
		// (Options.Keep): the call did not know it would not stream.
		return w.result(false, c.kept)
	}
	if c.failed || c.events == 0 {
		return nil, &idemguard.OpError{Reason: sanitize.ProviderError, Err: errors.New("the handler's event stream failed or held no event")}
	}
	// The removed members are counted as those of any answer: named as
	// members of the value, the guard drops them from the envelope and
	// reports them (EventDroppedField, Result.DroppedFields).
	v := map[string]any{"ok": true, "stopReason": string(sanitize.Completed), "data": map[string]any{"events": c.events}}
	for _, name := range c.dropped {
		if _, taken := v[name]; !taken {
			v[name] = true
		}
	}
	return v, nil
}
