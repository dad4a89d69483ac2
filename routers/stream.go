package routers

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/jsonvalue"
	"github.com/idemguard/idemguard/internal/live"
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

// doneEvent ends every successful stream, as OpenAI clients expect.
var doneEvent = live.Event{Data: []byte("[DONE]")}

// deliveryMembers say how an answer is delivered, not what it is.
var deliveryMembers = []string{"stream", "stream_options"}

// deliveryMode takes the delivery members out of a JSON object body and
// reports whether it asks for a stream. A body that is not an object with
// unique member names is returned as it is: the operation rejects it.
func deliveryMode(body json.RawMessage) (json.RawMessage, bool, error) {
	if !bytes.Contains(body, []byte(`"stream`)) {
		return body, false, nil
	}
	v, ok := jsonvalue.DecodeUniqueKeys(body)
	if !ok {
		return body, false, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return body, false, nil
	}
	stream := false
	if s, has := obj["stream"]; has {
		b, isBool := s.(bool)
		if !isBool {
			return nil, false, reject(errInvalidBody, "the body's stream member must be true or false")
		}
		stream = b
	}
	present := false
	for _, m := range deliveryMembers {
		if _, has := obj[m]; has {
			present = true
			delete(obj, m)
		}
	}
	if !present {
		return body, false, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, false, reject(errInvalidBody, "the body could not be re-encoded")
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), stream, nil
}

// runStream serves a POST whose body asked for a stream.
func (h *handlers) runStream(c *gin.Context, tenant tenancy.ID, scope *Scope, req guardedRequest) {
	clientKey, body, wait, waitApplied := req.clientKey, req.body, req.wait, req.waitApplied
	w := &streamResponse{h: h, c: c, scope: scope.Name, clientKey: clientKey, sse: newSSEWriter(c.Writer)}
	if waitApplied {
		c.Header(headerPreferenceApplied, preferenceApplied(wait))
	}
	run := scope.Stream
	res, err := h.guard.DoStream(c.Request.Context(), idemguard.Call{
		Tenant:    tenant,
		Scope:     scope.Name,
		ClientKey: clientKey,
		Inputs:    body,
		Settings:  scope.Settings,
		Wait:      wait,
		Timeout:   scope.Timeout,
		Detach:    true,
		Check:     inputCheck(scope, body),
	}, idemguard.StreamOperation{
		Run: func(ctx context.Context, emit func(idemguard.Chunk)) (any, error) {
			return run(ctx, body, emit)
		},
		Replay: scope.StreamReplay,
	}, w)
	if !w.begun {
		// Nothing was streamed: answered as a plain request would be.
		if err != nil {
			if clientKey != "" {
				h.setRef(c, scope.Name, clientKey)
			}
			h.fail(c, err)
			return
		}
		w.setRef(res.KeyHash)
		if res.Status == idemguard.StatusInProgress {
			c.Header(headerRetryAfter, h.retryAfter)
		}
		writeProblem(c, resultProblem(res))
		return
	}
	c.Set(keyHashKey, shortHash(res.KeyHash))
	if err == nil && res.Status == idemguard.StatusSucceeded {
		c.Set(stopReasonKey, string(res.StopReason))
		_ = w.sse.send(doneEvent)
		return
	}
	p := resultProblem(res)
	if err != nil {
		p = problemFor(err)
	}
	c.Set(stopReasonKey, string(p.StopReason))
	_ = w.sse.send(live.Event{Type: "error", Data: encodeJSON(p)})
}

// streamResponse is the idemguard.StreamWriter of one streamed request.
type streamResponse struct {
	h         *handlers
	c         *gin.Context
	scope     string
	clientKey string
	sse       *sseWriter
	begun     bool
}

func (w *streamResponse) setRef(keyHash string) {
	ref := w.clientKey
	if ref == "" {
		ref = derivedRefPrefix + keyHash
	}
	w.h.setRef(w.c, w.scope, ref)
}

// Begin sends the status and headers: the key reference, and the replay
// headers when the events are not this request's own execution.
func (w *streamResponse) Begin(s idemguard.StreamStart) {
	w.begun = true
	w.setRef(s.KeyHash)
	if s.Origin != idemguard.StreamLive {
		w.c.Set(replayedKey, true)
		w.c.Header(headerReplayed, "true")
		if !s.CompletedAt.IsZero() {
			w.c.Header(headerCompletedAt, formatTime(s.CompletedAt))
		}
	}
	w.sse.start(http.StatusOK)
}

// Write sends one event; an error means the client is gone.
func (w *streamResponse) Write(e idemguard.Chunk) error {
	return w.sse.send(live.Event{Type: e.Type, Data: e.Data})
}
