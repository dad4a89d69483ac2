package routers

import (
	"net/http"

	"github.com/idemguard/idemguard/internal/live"
)

// sseWriter writes server-sent events to a response, flushing each event so
// that it reaches the client as it happens (a streamed model answer, a
// background job's state). One writer serves one response.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	buf     []byte
	started bool
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

// start writes the status and the event-stream headers; headers already set
// on the response (Location, replay headers) go with them. Proxies are asked
// not to buffer (X-Accel-Buffering) and caches not to store.
func (s *sseWriter) start(status int) {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Del("Content-Length")
	s.w.WriteHeader(status)
}

// send writes one event and flushes it; the error says the client is gone.
func (s *sseWriter) send(e live.Event) error {
	s.start(http.StatusOK)
	s.buf = live.AppendSSE(s.buf[:0], e)
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// comment writes an SSE comment (a keep-alive) and flushes it.
func (s *sseWriter) comment(text string) error {
	s.start(http.StatusOK)
	if _, err := s.w.Write(live.Comment(text)); err != nil {
		return err
	}
	return s.rc.Flush()
}
