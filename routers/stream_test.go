package routers

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

// The delivery members leave the body before the key and fingerprint are
// derived: a plain and a streamed request of one key are one operation.
// Keeping "stream" in the body makes the first two rows fail.
func TestDeliveryModeIsNotIdentity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, want string
		stream           bool
	}{
		{"stream true", `{"messages":[1],"stream":true,"stream_options":{"include_usage":true}}`, `{"messages":[1]}`, true},
		{"stream false", `{"stream":false,"messages":[1]}`, `{"messages":[1]}`, false},
		{"no stream", `{"messages":[1],"x":"<a>"}`, `{"messages":[1],"x":"<a>"}`, false},
		{"numbers kept as written", `{"t":1.50,"stream":true}`, `{"t":1.50}`, true},
		{"not an object", `["stream"]`, `["stream"]`, false},
		{"repeated member left to the operation", `{"stream":true,"stream":false}`, `{"stream":true,"stream":false}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, stream, err := deliveryMode([]byte(tc.body))
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
			require.Equal(t, tc.stream, stream)
		})
	}
	_, _, err := deliveryMode([]byte(`{"stream":"yes"}`))
	require.ErrorIs(t, err, pipeline.ErrInvalidBody)
}

// deliveryModeByMaps is deliveryMode as it was written first: the body
// decoded into maps by pipeline.TakeMembers and encoded again.
func deliveryModeByMaps(body json.RawMessage) (json.RawMessage, bool, error) {
	if !bytes.Contains(body, []byte(`"stream`)) {
		return body, false, nil
	}
	rest, taken, _, err := pipeline.TakeMembers(body, deliveryMembers...)
	if err != nil || taken == nil {
		return rest, false, err
	}
	stream := false
	if s, has := taken["stream"]; has {
		b, isBool := s.(bool)
		if !isBool {
			return nil, false, pipeline.Reject(pipeline.ErrInvalidBody, "the body's stream member must be true or false")
		}
		stream = b
	}
	return rest, stream, nil
}

// deliveryMode gives what decoding the body into maps and encoding it again
// gave: the same rest (so the same key of a plain and a streamed call), the
// same delivery, the same bodies rejected.
func FuzzDeliveryModeMatchesTakeMembers(f *testing.F) {
	for _, s := range []string{`{"messages":[1],"stream":true,"stream_options":{"include_usage":true}}`,
		`{"stream":false,"messages":[1]}`, `{"t":1.50,"stream":true}`, `["stream"]`, `{"stream":true,"stream":false}`,
		`{"stream":"yes"}`, `{"stream":null}`, `{"stream_options":1,"z":{"y":"<\u2028>","x":[]}}`, `{"x":{"stream":true}}`,
		`{"stream":true,"x":{"a":1,"a":2}}`, ` {"stream" : true} `, `{"stream":true}}`, "{\"stream\":true,\"s\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rest, stream, err := deliveryMode(body)
		wantRest, wantStream, wantErr := deliveryModeByMaps(body)
		require.Equal(t, string(wantRest), string(rest))
		require.Equal(t, wantStream, stream)
		require.Equal(t, fmt.Sprint(wantErr), fmt.Sprint(err))
	})
}

// Waiters of one key are bounded: over the guard's MaxWaiters a request
// with Prefer: wait is refused at once with 429 and Retry-After, never
// queued. Without the bound both waiters wait and no 429 comes.
func TestTooManyWaitersIs429(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{guard: func(c *idemguard.Config) { c.MaxWaiters = 1 }})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer b.releaseNow()
	wg.Go(func() { b.post("slow", "w-1", `{}`) })
	<-b.started
	codes := make(chan int, 2)
	for range 2 {
		wg.Go(func() { codes <- b.post("slow", "w-1", `{}`, "Prefer", "wait=20").Code })
	}
	select {
	case code := <-codes:
		require.Equal(t, http.StatusTooManyRequests, code, "the second waiter is refused at once")
	case <-time.After(15 * time.Second):
		t.Fatal("no waiter was refused")
	}
	b.releaseNow()
	require.Equal(t, http.StatusOK, <-codes)
}

// flushLog is a response writer that records what was written and where
// the handler flushed.
type flushLog struct {
	*httptest.ResponseRecorder
	ops []string // "write:<bytes>" and "flush", in order
}

func (f *flushLog) Write(p []byte) (int, error) {
	f.ops = append(f.ops, "write:"+string(p))
	return f.ResponseRecorder.Write(p)
}

func (f *flushLog) Flush() {
	f.ops = append(f.ops, "flush")
	f.ResponseRecorder.Flush()
}

// A stream's events are flushed as they come, but its last one ([DONE], or
// the error event) is not: the end of the response flushes it with the end
// of the chunked body in one write, so a client that stops reading at
// [DONE] finds the body ended and keeps its connection for the next
// request. Flushing [DONE] alone (Send instead of End) fails this test.
func TestStreamsLastEventGoesOutWithTheResponsesEnd(t *testing.T) {
	t.Parallel()
	stream := Scope{Name: "chat.stream",
		Run: func(context.Context, json.RawMessage) (any, error) { return echoResult(json.RawMessage(`{}`)) },
		Stream: func(_ context.Context, _ json.RawMessage, emit func(idemguard.Chunk)) (any, error) {
			emit(idemguard.Chunk{Data: []byte(`{"n":1}`)})
			emit(idemguard.Chunk{Data: []byte(`{"n":2}`)})
			return echoResult(json.RawMessage(`{}`))
		}}
	b := setup(t, setupOpts{options: func(o *Options) { o.Scopes = append(o.Scopes, stream) }})
	r := httptest.NewRequest(http.MethodPost, "/v1/ops/chat.stream", strings.NewReader(`{"stream":true}`))
	r.Header.Set("Authorization", "Bearer "+acmeKey1)
	r.Header.Set("Idempotency-Key", "last-event")
	w := &flushLog{ResponseRecorder: httptest.NewRecorder()}
	b.handler.ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code)
	require.NotEmpty(t, w.ops)
	id1 := strings.TrimSuffix(strings.TrimPrefix(w.ops[0], "write:id: "), "\ndata: {\"n\":1}\n\n") // each event carries its id
	require.Equal(t, []string{
		"write:id: " + id1 + "\ndata: {\"n\":1}\n\n", "flush",
		"write:id: " + strings.TrimSuffix(id1, "1") + "2\ndata: {\"n\":2}\n\n", "flush",
		"write:data: [DONE]\n\n",
	}, w.ops)
}
