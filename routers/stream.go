package routers

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/jsonvalue"
	"github.com/idemguard/idemguard/internal/live"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/tenancy"
)

// Streamed answers
//
// A scope with a Stream operation answers a body with "stream": true as
// server-sent events (text/event-stream): the events idemguard built from
// the operation's allowlisted fields, then "data: [DONE]". The delivery
// members "stream" and "stream_options" are taken out of the body before
// anything else sees it: they are part of neither the key nor the
// fingerprint, so a plain and a streamed request of one key are one
// operation and get the same content. A failure after the first event ends
// the stream with an "error" event whose data is the problem.
//
// Each event carries its id, "<attempt>-<execution>-<n>" ([DONE] and error events
// none). A request of the key with Last-Event-ID resumes after that event:
// from the running execution in this process, or from the stored events
// (pipeline.Stream, the guard's Call.LastEventID).

// doneEvent ends every successful stream, as OpenAI clients expect.
var doneEvent = live.Event{Data: []byte("[DONE]")}

// deliveryMembers say how an answer is delivered, not what it is.
var deliveryMembers = []string{"stream", "stream_options"}

// deliveryMode takes the delivery members out of a JSON object body and
// reports whether it asks for a stream. A body that is not an object with
// unique member names is returned as it is: the operation rejects it.
// The rest is what pipeline.TakeMembers gives (the object re-encoded by
// encoding/json), made by jsonvalue.TakeCanonical without decoding the
// body into maps and encoding them again.
func deliveryMode(body json.RawMessage) (json.RawMessage, bool, error) {
	if !bytes.Contains(body, []byte(`"stream`)) {
		return body, false, nil
	}
	rest, taken, ok := jsonvalue.TakeCanonical(body, deliveryMembers...)
	if !ok || taken[0] == nil && taken[1] == nil {
		return body, false, nil
	}
	switch string(taken[0]) {
	case "", "false":
		return rest, false, nil
	case "true":
		return rest, true, nil
	}
	return nil, false, pipeline.Reject(pipeline.ErrInvalidBody, "the body's stream member must be true or false")
}

// runStream serves a POST whose body asked for a stream.
func (h *handlers) runStream(c *gin.Context, tenant tenancy.ID, scope *Scope, req pipeline.Request) {
	if req.WaitApplied {
		c.Header(pipeline.HeaderPreferenceApplied, pipeline.PreferenceApplied(req.Wait))
	}
	out := pipeline.NewStream(c.Writer, func(st idemguard.StreamStart) {
		h.setRef(c.Writer.Header(), scope.Name, h.ref(c, scope.Name, req.ClientKey, st.KeyHash))
		if st.Origin != idemguard.StreamLive {
			logOf(c).replayed = true
		}
	})
	run, body := scope.Stream, req.Body
	res, err := h.guard.DoStream(c.Request.Context(), req.Call(tenant, h.route(tenant, scope, body, false), body), idemguard.StreamOperation{
		Run: func(ctx context.Context, emit func(idemguard.Chunk)) (any, error) {
			return run(ctx, body, emit)
		},
		Replay: scope.StreamReplay,
	}, out)
	if !out.Begun {
		// Nothing was streamed: answered as a plain request would be.
		if h.called(c, scope.Name, req, res, err) {
			h.problem(c, pipeline.ResultProblem(res))
		}
		return
	}
	logOf(c).keyHash = shortHash(res.KeyHash)
	p, failed := pipeline.StreamFailure(res, err)
	if !failed {
		logOf(c).stopReason = string(res.StopReason)
		_ = out.SSE.End(doneEvent) // flushed with the response's end
		return
	}
	logOf(c).stopReason = string(p.StopReason)
	_ = out.SSE.End(h.answers.ErrorEvent(p))
}
