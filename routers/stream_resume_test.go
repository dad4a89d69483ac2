package routers

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/live"
	"github.com/idemguard/idemguard/routers/middleware"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// readSSE parses a text/event-stream body.
func readSSE(t *testing.T, body string) []sseEvent {
	t.Helper()
	var out []sseEvent
	br := bufio.NewReader(strings.NewReader(body))
	for {
		e, err := live.ReadSSE(br)
		if err != nil {
			require.ErrorIs(t, err, io.EOF)
			return out
		}
		out = append(out, sseEvent{id: e.ID, kind: e.Type, data: string(e.Data)})
	}
}

// runOf is the "<attempt>-<execution>" of a first event's id, of attempt 1.
func runOf(t *testing.T, id string) string {
	t.Helper()
	require.Regexp(t, `^1-[0-9a-f]{8}-1$`, id)
	return strings.TrimSuffix(id, "-1")
}

// wordsScope streams five words, each a chunk, once released.
func wordsScope(runs *atomic.Int32, gate <-chan struct{}) Scope {
	run := func(ctx context.Context, _ json.RawMessage, emit func(idemguard.Chunk)) (any, error) {
		runs.Add(1)
		var text strings.Builder
		for i := range 5 {
			if i == 1 && gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			w := fmt.Sprintf("w%d ", i)
			text.WriteString(w)
			emit(idemguard.Chunk{Data: []byte(`{"delta":"` + w + `"}`)})
		}
		return sanitize.Envelope{OK: true, StopReason: sanitize.Completed, Data: map[string]any{"text": text.String()}}, nil
	}
	return Scope{Name: "words", Stream: run, Run: func(ctx context.Context, in json.RawMessage) (any, error) {
		return run(ctx, in, func(idemguard.Chunk) {})
	}}
}

// Every event of a streamed answer carries its id, "<attempt>-<execution>-<n>"; a
// request with Last-Event-ID gets what follows it, with the same ids, so
// the two parts join to the whole answer; an id of another attempt starts
// again from the first event after a restart event and header; a malformed
// one is refused before anything runs. The same pipeline serves the REST
// door and the middleware. Without the id in Stream.Write the ids are
// missing; without Request.LastEventID in Request.Call the resumed answer
// repeats every event.
func TestStreamEventsCarryIDsAndResumeAfterLastEventID(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	b := setup(t, setupOpts{options: func(o *Options) { o.Scopes = append(o.Scopes, wordsScope(&runs, nil)) }})
	body := `{"q":"resume","stream":true}`

	first := b.post("words", "r-1", body)
	require.Equal(t, http.StatusOK, first.Code, first.Body.String())
	all := readSSE(t, first.Body.String())
	require.Len(t, all, 6)
	run := runOf(t, all[0].id)
	for i, e := range all[:5] {
		require.Equal(t, fmt.Sprintf("%s-%d", run, i+1), e.id)
	}
	require.Equal(t, sseEvent{data: "[DONE]"}, all[5], "[DONE] carries no id")

	rest := b.post("words", "r-1", body, "Last-Event-ID", run+"-2")
	require.Equal(t, http.StatusOK, rest.Code, rest.Body.String())
	require.Equal(t, "true", rest.Header().Get("Idempotent-Replayed"))
	require.Empty(t, rest.Header().Get("Idempotent-Stream-Restart"))
	require.Equal(t, all[2:], readSSE(t, rest.Body.String()), "the rest, with the same ids, each event once")

	other := b.post("words", "r-1", body, "Last-Event-ID", "3-0123abcd-2")
	require.Equal(t, "superseded", other.Header().Get("Idempotent-Stream-Restart"))
	got := readSSE(t, other.Body.String())
	require.Equal(t, sseEvent{kind: "restart", data: `{"restart":"superseded","attempt":1}`}, got[0])
	require.Equal(t, all, got[1:])

	for _, bad := range []string{"abc", "1-2", "0-0123abcd-1", "1-0123ABCD-1", "1-0123abcd-", "1-0123abcd-2-3"} {
		w := b.post("words", "r-2", body, "Last-Event-ID", bad)
		require.Equal(t, http.StatusBadRequest, w.Code, bad)
		require.Equal(t, ProblemTypePrefix+"invalid-last-event-id", problemOf(t, w)["type"])
	}
	require.EqualValues(t, 1, runs.Load())

	t.Run("middleware", func(t *testing.T) {
		t.Parallel()
		resumeThroughMiddleware(t, b.store)
	})
}

// resumeThroughMiddleware is TestStreamEventsCarryIDsAndResumeAfterLastEventID
// through the middleware, on a guard over st: the guard's ids replace the
// handler's, and Last-Event-ID resumes after them.
func resumeThroughMiddleware(t *testing.T, st store.Store) {
	var calls atomic.Int32
	h := middleware.Idempotent(acmeMiddleware(t, st, "mw.stream"))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "id: mine-%d\ndata: {\"n\":%d}\n\n", i, i)
		}
	}))
	send := func(last string) (http.Header, []sseEvent) {
		r, err := http.NewRequest(http.MethodPost, "/mw", strings.NewReader(`{}`))
		require.NoError(t, err)
		r.Header.Set("Accept", "text/event-stream")
		r.Header.Set("Idempotency-Key", "mw-1")
		if last != "" {
			r.Header.Set("Last-Event-ID", last)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		return w.Header(), readSSE(t, w.Body.String())
	}
	_, live := send("")
	run := runOf(t, live[0].id)
	require.Equal(t, []sseEvent{{run + "-1", "", `{"n":0}`}, {run + "-2", "", `{"n":1}`}, {run + "-3", "", `{"n":2}`}}, live,
		"the guard's ids replace the handler's")
	_, rest := send(run + "-1")
	require.Equal(t, live[1:], rest)
	hd, again := send("2-0123abcd-1")
	require.Equal(t, "superseded", hd.Get("Idempotent-Stream-Restart"))
	require.Equal(t, live, again[1:])
	require.EqualValues(t, 1, calls.Load())
}

// Over the guard's MaxLiveStreams a streamed request that would run is
// refused with 503, its problem type and Retry-After, before it claims:
// the same request runs once the running stream has ended.
func TestTooManyLiveStreamsIs503(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	gate := make(chan struct{})
	b := setup(t, setupOpts{
		guard:   func(c *idemguard.Config) { c.MaxLiveStreams = 1 },
		options: func(o *Options) { o.Scopes = append(o.Scopes, wordsScope(&runs, gate)) },
	})
	done := make(chan int, 1)
	go func() { done <- b.post("words", "busy", `{"stream":true}`).Code }()
	require.Eventually(t, func() bool { return runs.Load() == 1 }, 10*time.Second, time.Millisecond)

	w := b.post("words", "other", `{"q":2,"stream":true}`)
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	require.Equal(t, ProblemTypePrefix+"too-many-live-streams", problemOf(t, w)["type"])
	require.NotEmpty(t, w.Header().Get("Retry-After"))
	require.EqualValues(t, 1, runs.Load(), "nothing ran")

	close(gate)
	require.Equal(t, http.StatusOK, <-done)
	require.Equal(t, http.StatusOK, b.post("words", "other", `{"q":2,"stream":true}`).Code)
	require.EqualValues(t, 2, runs.Load())
}
