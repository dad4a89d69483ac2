package integration

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Streams that survive a dropped connection, through the built binary on
// MariaDB: two replicas of serve share the database and the fake upstream.

// cutAfter opens a streamed request for key on s, reads k events while it
// lets the upstream send one chunk per event, and cuts the connection. It
// returns what was read.
func cutAfter(t *testing.T, c *http.Client, s *service, up *streamLLM, key string, k int) sse {
	t.Helper()
	ctx, cut := context.WithCancel(context.Background())
	defer cut()
	go func() { up.step <- struct{}{} }() // the answer's headers go with its first event
	r, err := openStream(ctx, c, s, key, streamBody)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.resp.StatusCode)
	got := sse{status: r.resp.StatusCode, header: r.resp.Header}
	for i := range k {
		if i > 0 {
			up.step <- struct{}{}
		}
		e, err := r.next()
		require.NoError(t, err)
		got.events = append(got.events, e)
	}
	cut()
	_ = r.resp.Body.Close()
	return got
}

// runOf is the "<attempt>-<execution>" of a first event's id, of attempt 1.
func runOf(t *testing.T, id string) string {
	t.Helper()
	require.Regexp(t, `^1-[0-9a-f]{8}-1$`, id)
	return strings.TrimSuffix(id, "-1")
}

// finish lets the upstream send its remaining chunks (the first k were sent).
func finish(t *testing.T, up *streamLLM, k int) {
	t.Helper()
	for range up.n - k {
		select {
		case up.step <- struct{}{}:
		case <-time.After(20 * time.Second):
			t.Errorf("the upstream stopped after %d chunks", up.progress.Load())
			return
		}
	}
}

// A streamed request cut after three events and sent again with
// Last-Event-ID gets the rest: on the same replica live from the running
// execution (without Prefer: wait), on another replica from the stored
// events (409 while it runs there, or Prefer: wait). Each time the two
// parts join to the whole answer, each event once with its id, equal to
// the stored answer; the upstream is called once per key. Without the ids
// the resumed request cannot say where it stopped, and without
// Last-Event-ID in the pipeline it repeats the first three events.
func TestStreamResumesAfterADroppedConnection(t *testing.T) {
	t.Parallel()
	db := database(t)
	llm := newFakeLLM(t)
	up := &streamLLM{n: 12, step: make(chan struct{})}
	llm.set(up.behave)
	s1 := streamService(t, db, llm)
	s2 := streamService(t, db, llm)
	c := newClient(t)

	whole := func(t *testing.T, key string, parts ...sse) {
		t.Helper()
		joined := sse{}
		for _, p := range parts {
			joined.events = append(joined.events, p.events...)
		}
		require.True(t, joined.done(), "the resumed stream ends with [DONE]")
		require.Equal(t, up.text(), joined.content(t), "the whole text, each event once")
		ids := map[string]bool{}
		for i, e := range joined.events[:len(joined.events)-1] {
			require.Equal(t, "", e.typ)
			require.False(t, ids[e.id], "event %s repeated", e.id)
			ids[e.id] = true
			require.Equal(t, runOf(t, joined.events[0].id)+"-"+strconv.Itoa(i+1), e.id)
		}
		env := requireEnvelope(t, post(t, c, s2, "chat", acmeKey, key, plainBody))
		require.Equal(t, joined.content(t), env.Data["text"], "the concatenation is the stored answer")
		replay := stream(t, c, s1, key, streamBody)
		require.Equal(t, joined.events, replay.events, "a replay carries the same events and ids")
	}

	t.Run("same replica, live", func(t *testing.T) {
		calls := llm.calls.Load()
		first := cutAfter(t, c, s1, up, "resume-same", 3)
		run := runOf(t, first.events[0].id)
		require.Equal(t, run+"-3", first.events[2].id)
		r, err := openStream(context.Background(), c, s1, "resume-same", streamBody, [2]string{"Last-Event-ID", run + "-3"})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.resp.StatusCode)
		require.Equal(t, "true", r.resp.Header.Get("Idempotent-Replayed"), "the events of the first request's execution")
		require.Empty(t, r.resp.Header.Get("Idempotent-Completed-At"), "followed live, not replayed")
		require.Empty(t, r.resp.Header.Get("Idempotent-Stream-Restart"))
		up.step <- struct{}{}
		next, err := r.next()
		require.NoError(t, err)
		require.Equal(t, run+"-4", next.id)
		require.Less(t, up.progress.Load(), int32(up.n), "the fourth event arrives while the upstream still streams")
		go finish(t, up, 4)
		rest := r.readAll(t, next)
		whole(t, "resume-same", first, rest)
		require.Equal(t, calls+1, llm.calls.Load(), "one upstream call")
	})

	t.Run("other replica, stored", func(t *testing.T) {
		calls := llm.calls.Load()
		first := cutAfter(t, c, s1, up, "resume-other", 3)
		run := runOf(t, first.events[0].id)
		busy := stream(t, c, s2, "resume-other", streamBody, [2]string{"Last-Event-ID", run + "-3"})
		requireProblem(t, answer{status: busy.status, header: busy.header, body: []byte(busy.raw)}, http.StatusConflict, "in_progress")
		go finish(t, up, 3) // the answer comes once stored: the waiting request's headers with it
		r, err := openStream(context.Background(), c, s2, "resume-other", streamBody,
			[2]string{"Last-Event-ID", run + "-3"}, [2]string{"Prefer", "wait=30"})
		require.NoError(t, err)
		rest := r.readAll(t)
		require.Equal(t, http.StatusOK, rest.status, rest.raw)
		require.Equal(t, run+"-4", rest.events[0].id)
		whole(t, "resume-other", first, rest)

		again := stream(t, c, s2, "resume-other", streamBody, [2]string{"Last-Event-ID", run + "-10"})
		require.Equal(t, rest.events[7:], again.events, "once stored, any replica resumes at once")
		require.Equal(t, calls+1, llm.calls.Load(), "one upstream call")
	})
}
