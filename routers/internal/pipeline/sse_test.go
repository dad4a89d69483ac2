package pipeline

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/live"
)

func TestSSEWriterFlushesEachEvent(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Length", "12")
	s := NewSSE(rec)
	require.NoError(t, s.Send(live.Event{ID: "1", Data: []byte(`{"a":1}`)}))
	require.True(t, rec.Flushed, "each event is flushed as it is written")
	require.NoError(t, s.Comment("keep-alive"))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "text/event-stream", rec.Header().Get("Content-Type"))
	require.Equal(t, "no-cache", rec.Header().Get("Cache-Control"))
	require.Empty(t, rec.Header().Get("Content-Length"))
	require.Equal(t, "id: 1\ndata: {\"a\":1}\n\n: keep-alive\n\n", rec.Body.String())
}

// nopFlusher is a ResponseWriter that allocates nothing.
type nopFlusher struct{ h http.Header }

func (w nopFlusher) Header() http.Header       { return w.h }
func (nopFlusher) Write(p []byte) (int, error) { return len(p), nil }
func (nopFlusher) WriteHeader(int)             {}
func (nopFlusher) Flush()                      {}

// A stream's writer, its headers and its first events cost a few
// allocations, not one per header and per growth of its buffer (10 before:
// the writer, its ResponseController, a value per header, the buffer grown
// by each event).
func TestSSEStartAndFirstEventsAllocateLittle(t *testing.T) {
	w := nopFlusher{h: http.Header{}}
	events := []live.Event{{ID: "1-abcdef01-1", Data: make([]byte, 20)}, {ID: "1-abcdef01-2", Data: make([]byte, 100)},
		{ID: "1-abcdef01-3", Data: make([]byte, 300)}}
	allocs := testing.AllocsPerRun(10, func() {
		clear(w.h)
		s := NewSSE(w)
		for _, e := range events {
			_ = s.Send(e)
		}
	})
	require.LessOrEqual(t, allocs, 3.0)
	require.Equal(t, []string{"text/event-stream"}, w.h["Content-Type"])
	require.Equal(t, []string{"no-cache"}, w.h["Cache-Control"])
	require.Equal(t, []string{"no"}, w.h["X-Accel-Buffering"])
}

// A stream writer and its SSE writer are one allocation, and write as the
// SSE writer alone does.
func TestNewStreamIsOneAllocation(t *testing.T) {
	w := nopFlusher{h: http.Header{}}
	require.Equal(t, 1.0, testing.AllocsPerRun(10, func() { _ = NewStream(w, nil) }))
	rec := httptest.NewRecorder()
	var began []idemguard.StreamStart
	s := NewStream(rec, func(st idemguard.StreamStart) { began = append(began, st) })
	s.Begin(idemguard.StreamStart{Origin: idemguard.StreamLive, Attempt: 1})
	require.NoError(t, s.Write(idemguard.Chunk{ID: "1-abcdef01-1", Data: []byte(`{"a":1}`)}))
	require.True(t, s.Begun)
	require.Len(t, began, 1)
	require.Equal(t, "text/event-stream", rec.Header().Get("Content-Type"))
	require.Equal(t, "id: 1-abcdef01-1\ndata: {\"a\":1}\n\n", rec.Body.String())
}
