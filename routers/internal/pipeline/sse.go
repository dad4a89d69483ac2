package pipeline

import (
	"net/http"

	"github.com/idemguard/idemguard/internal/live"
)

// SSE writes server-sent events to a response, flushing each event so
// that it reaches the client as it happens (a streamed model answer, a
// background job's state). One writer serves one response.
type SSE struct {
	w       http.ResponseWriter
	rc      http.ResponseController // a value: no allocation of its own
	buf     []byte
	Started bool // the status has been sent
}

// NewSSE is the event writer of the response w.
func NewSSE(w http.ResponseWriter) *SSE {
	return &SSE{w: w, rc: *http.NewResponseController(w)}
}

// Start writes the status and the event-stream headers; headers already set
// on the response (Location, replay headers) go with them, with the first
// event. Proxies are asked not to buffer (X-Accel-Buffering) and caches not
// to store.
func (s *SSE) Start(status int) {
	if s.Started {
		return
	}
	s.Started = true
	h := s.w.Header()
	// Set, with the three values in one allocation.
	v := []string{"text/event-stream", "no-cache", "no"}
	h["Content-Type"], h["Cache-Control"], h["X-Accel-Buffering"] = v[0:1:1], v[1:2:2], v[2:3:3]
	h.Del("Content-Length")
	s.w.WriteHeader(status)
}

// sseBuf is the first size of an SSE's buffer: most events fit it, so
// it is not grown again and again by the first few.
const sseBuf = 512

// Send writes one event and flushes it; the error says the client is gone.
func (s *SSE) Send(e live.Event) error {
	s.Start(http.StatusOK)
	if s.buf == nil {
		s.buf = make([]byte, 0, sseBuf)
	}
	s.buf = live.AppendSSE(s.buf[:0], e)
	if _, err := s.w.Write(s.buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// End writes the last event of the response, unflushed: the handler
// returns next, and the end of the response flushes it together with the
// end of the chunked body, in one write. A client that stops reading at the
// last event ([DONE]) then finds the body ended and keeps its connection;
// flushed alone, the body's end came later, the client closed a body it
// had not read to its end, and its next request dialed again.
func (s *SSE) End(e live.Event) error {
	s.Start(http.StatusOK)
	s.buf = live.AppendSSE(s.buf[:0], e)
	_, err := s.w.Write(s.buf)
	return err
}

// Comment writes an SSE comment (a keep-alive) and flushes it.
func (s *SSE) Comment(text string) error {
	s.Start(http.StatusOK)
	if _, err := s.w.Write(live.Comment(text)); err != nil {
		return err
	}
	return s.rc.Flush()
}
