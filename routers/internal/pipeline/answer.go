package pipeline

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"
	"unsafe"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/live"
)

// Answers is the one error writer and result writer of every entry path:
// the REST API's operation, job and stream, and the middleware's plain and
// streamed forms. What differs between the doors is its values (the
// Retry-After of each kind, the log), never its code.
type Answers struct {
	// RetryAfter is the Retry-After of a 409 in progress and of a 429, in
	// whole seconds (RetryAfterSeconds).
	RetryAfter string
	// UnavailableRetryAfter is the Retry-After of a 503.
	UnavailableRetryAfter string
	// Log receives the 500s, where they are answered.
	Log *slog.Logger
	// Encode, when set, renders a problem in a door's own wire (its
	// content type and body), with the problem's status; nil: RFC 9457
	// problem+json. Statuses and Retry-After stay the pipeline's.
	Encode func(Problem) (contentType string, body []byte)
}

// WithEncode is a copy of a whose problems Encode renders.
func (a *Answers) WithEncode(encode func(Problem) (string, []byte)) *Answers {
	b := *a
	b.Encode = encode
	return &b
}

// encode is p in a's wire.
func (a *Answers) encode(p Problem) (string, []byte) {
	if a.Encode != nil {
		return a.Encode(p)
	}
	return ContentProblem, EncodeJSON(p)
}

// NewAnswers renders the two Retry-After durations.
func NewAnswers(retryAfter, unavailable time.Duration, log *slog.Logger) *Answers {
	return &Answers{RetryAfter: RetryAfterSeconds(retryAfter), UnavailableRetryAfter: RetryAfterSeconds(unavailable), Log: log}
}

// retryAfter is the Retry-After p promises ("" for none): the one place that
// decides it. A 409 in progress, a 429 and a 503 of the service each tell
// the client to retry after Retry-After seconds; an operation's stored
// failure answers with its own status and promises nothing.
func (a *Answers) retryAfter(p Problem) string {
	switch {
	case p.Type == ProblemTypePrefix+slugOperationFailed:
		return ""
	case p.Status == http.StatusServiceUnavailable:
		return a.UnavailableRetryAfter
	case p.Status == http.StatusTooManyRequests,
		p.Status == http.StatusConflict && p.Type == ProblemTypePrefix+slugInProgress:
		return a.RetryAfter
	}
	return ""
}

// Fail answers err as a problem (ProblemFor) and returns it. An
// authentication failure of idemguard's bearer authentication carries its
// challenge; a 500 is logged here, where it is answered (the guard has
// already logged store failures with their cause). route names the route
// in that log, never the raw path.
func (a *Answers) Fail(w http.ResponseWriter, r *http.Request, route string, err error) Problem {
	p := ProblemFor(err)
	setChallenge(w.Header(), err)
	var le *LimitError
	if errors.As(err, &le) && le.RetryAfter > 0 {
		w.Header().Set(HeaderRetryAfter, RetryAfterSeconds(le.RetryAfter))
	}
	if p.Status == http.StatusInternalServerError {
		a.Log.Error("http: unexpected error", slog.String("method", r.Method), slog.String("route", route), slog.Any("err", err))
	}
	a.Problem(w, p)
	return p
}

// Problem writes p as application/problem+json, with the Retry-After it
// promises, unless the caller already set a more precise one (the failed
// authentication limit knows when its client's window ends).
func (a *Answers) Problem(w http.ResponseWriter, p Problem) {
	if ra := a.retryAfter(p); ra != "" && w.Header().Get(HeaderRetryAfter) == "" {
		w.Header().Set(HeaderRetryAfter, ra)
	}
	ct, body := a.encode(p)
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// Result answers res: the stored answer with its status and stored headers
// (a replay marked Idempotent-Replayed, with the original completion time),
// 409 with Retry-After while another caller runs it, and a problem for a
// failure. The first caller and every replay get the same status, headers
// and body.
func (a *Answers) Result(w http.ResponseWriter, req Request, res idemguard.Result) {
	h := w.Header()
	if req.WaitApplied {
		h.Set(HeaderPreferenceApplied, PreferenceApplied(req.Wait))
	}
	SetReplayed(h, res.Cached, res.CompletedAt)
	if res.Forced {
		h[HeaderReplacesAttempt] = []string{strconv.Itoa(res.Replaced)}
	}
	if res.Status != idemguard.StatusSucceeded {
		a.Problem(w, ResultProblem(res))
		return
	}
	for k, v := range res.Header {
		h[k] = v
	}
	if ct := h["Content-Type"]; len(ct) == 0 || ct[0] == "" { // Get, without canonicalizing the constant name
		h["Content-Type"] = contentJSON
	}
	if res.StatusCode == http.StatusNoContent || res.StatusCode == http.StatusNotModified {
		w.WriteHeader(res.StatusCode)
		return
	}
	if len(res.Body) > netHTTPBuffered || h["Content-Length"] != nil { // a stored or earlier one is replaced
		h["Content-Length"] = []string{strconv.Itoa(len(res.Body))}
	}
	w.WriteHeader(res.StatusCode)
	_, _ = w.Write(res.Body)
}

// netHTTPBuffered is the size of the buffer net/http's server keeps a
// response body in until the handler returns (bufferBeforeChunkingSize):
// a body that fits is sent with the Content-Length net/http counts itself,
// without allocating, so Result declares the length of longer bodies only
// (which would otherwise be sent chunked).
const netHTTPBuffered = 2048

// SetReplayed marks an answer that is not this request's own execution:
// Idempotent-Replayed, and Idempotent-Completed-At when known.
func SetReplayed(h http.Header, replayed bool, completedAt time.Time) {
	if !replayed {
		return
	}
	h[HeaderReplayed] = replayedTrue
	if !completedAt.IsZero() {
		h[HeaderCompletedAt] = timeHeader(completedAt)
	}
}

// timeValue is a header value of one FormatTime text: the value's slice
// array and the text's bytes, in one allocation.
type timeValue struct {
	v    [1]string
	text [timeLen]byte
}

// timeLen is the longest FormatTime text of a four-digit year.
const timeLen = len("2006-01-02T15:04:05.999999999Z")

// timeHeader is []string{FormatTime(t)} in one allocation instead of two:
// the text is written into the value's own array, which nothing writes
// again (the string is made over it with unsafe.String).
func timeHeader(t time.Time) []string {
	tv := new(timeValue)
	b := appendTime(tv.text[:0], t)
	if len(b) == 0 || &b[0] != &tv.text[0] { // a year of five digits outgrew the array
		return []string{string(b)}
	}
	tv.v[0] = unsafe.String(&tv.text[0], len(b))
	return tv.v[:]
}

// Header values every answer shares, set without allocating: a handler
// that changes such a header replaces its slice (Set, or append past its
// capacity), never writes into it. The names they are set under are in
// canonical form.
var (
	replayedTrue = []string{"true"}
	contentJSON  = []string{ContentJSON}
)

// FormatTime renders t as RFC 3339 in UTC, with its sub-second digits.
func FormatTime(t time.Time) string {
	var buf [timeLen]byte
	return string(appendTime(buf[:0], t))
}

// appendTime appends FormatTime's text of t to b.
func appendTime(b []byte, t time.Time) []byte { return t.UTC().AppendFormat(b, time.RFC3339Nano) }

// Stream is the idemguard.StreamWriter of every streamed entry path: the
// events go to the client as server-sent events as they happen, each with
// its id ("<attempt>-<execution>-<n>"), which a reconnecting client sends back as
// Last-Event-ID. OnBegin, when set, adds a door's own headers before the
// status is sent.
//
// A stream asked to resume that starts again from its first event instead
// says so before that event: the Idempotent-Stream-Restart header names the
// reason, and a "restart" event without an id (so that an EventSource's
// last event id is kept) carries it with the attempt that follows:
// {"restart":"superseded","attempt":2}. The client drops what it has of the
// earlier stream.
type Stream struct {
	SSE     *SSE
	OnBegin func(idemguard.StreamStart)
	// Begun: the status has been sent; what follows is events.
	Begun bool
}

// NewStream is the stream writer of the response w, calling onBegin (may
// be nil) at Begin. Its SSE writer comes in the same allocation.
func NewStream(w http.ResponseWriter, onBegin func(idemguard.StreamStart)) *Stream {
	s := &struct {
		Stream
		sse SSE
	}{Stream: Stream{OnBegin: onBegin}, sse: SSE{w: w, rc: *http.NewResponseController(w)}}
	s.SSE = &s.sse
	return &s.Stream
}

// Begin sends the status and headers: the door's, and the replay headers
// when the events are not this request's own execution.
func (s *Stream) Begin(st idemguard.StreamStart) {
	s.Begun = true
	if s.OnBegin != nil {
		s.OnBegin(st)
	}
	SetReplayed(s.SSE.w.Header(), st.Origin != idemguard.StreamLive, st.CompletedAt)
	if st.Replaced > 0 {
		s.SSE.w.Header().Set(HeaderReplacesAttempt, strconv.Itoa(st.Replaced))
	}
	if st.Restart != "" {
		s.SSE.w.Header().Set(HeaderStreamRestart, string(st.Restart))
	}
	s.SSE.Start(http.StatusOK)
	switch {
	case st.Restart != "":
		_ = s.SSE.Send(RestartEvent(st))
	case st.Origin == idemguard.StreamAttached:
		// A follower's next event may be a while coming: the client learns
		// at once that it is answered (and an EventSource that it resumed).
		_ = s.SSE.rc.Flush()
	}
}

// RestartEvent is the "restart" event that begins a stream asked to resume
// which starts again from its first event.
func RestartEvent(st idemguard.StreamStart) live.Event {
	return live.Event{Type: "restart", Data: EncodeJSON(struct {
		Restart idemguard.StreamRestart `json:"restart"`
		Attempt int                     `json:"attempt"`
	}{st.Restart, st.Attempt})}
}

// Write sends one event with its id; an error means the client is gone.
func (s *Stream) Write(e idemguard.Chunk) error {
	return s.SSE.Send(live.Event{ID: e.ID, Type: e.Type, Data: e.Data})
}

// StreamFailure is the problem that ends a begun stream which did not
// succeed, sent as an "error" event; false for a stream that succeeded.
func StreamFailure(res idemguard.Result, err error) (Problem, bool) {
	switch {
	case err != nil:
		return ProblemFor(err), true
	case res.Status != idemguard.StatusSucceeded:
		return ResultProblem(res), true
	}
	return Problem{}, false
}

// ErrorEvent is the "error" event that carries p, in a's wire.
func (a *Answers) ErrorEvent(p Problem) live.Event {
	_, body := a.encode(p)
	return live.Event{Type: "error", Data: body}
}
