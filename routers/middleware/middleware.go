// Package middleware puts idemguard's guard on a team's own net/http
// routes: Idempotent wraps a handler so that it runs at most once per
// (tenant, scope, Idempotency-Key), and every duplicate gets the stored
// answer. It depends on net/http only; routers.Idempotent is the same
// middleware for gin, and errors are the REST API's problem+json answers.
package middleware

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/tenancy"
)

// Defaults of Options, and of the REST API's routers.Options.
const (
	// DefaultMaxBodyBytes is the largest request body accepted (1 MiB).
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxWait caps Prefer: wait=N.
	DefaultMaxWait = 30 * time.Second
	// DefaultRetryAfter is the Retry-After of a 409 (operation in
	// progress) and of a 429.
	DefaultRetryAfter = time.Second
	// DefaultUnavailableRetryAfter is the Retry-After of a 503.
	DefaultUnavailableRetryAfter = 5 * time.Second
)

// Options configure the middleware: Idempotent here, for net/http, and
// routers.Idempotent, for gin.
type Options struct {
	// Guard runs the handlers. Required.
	Guard *idemguard.Guard
	// Tenant returns the tenant of a request. Defaults to the tenant put in
	// the request context by routers/auth's Authenticator (tenancy.FromContext).
	// An error, or no tenant, answers 401.
	Tenant func(r *http.Request) (tenancy.ID, error)
	// Scope names the guarded operation. Defaults to the route: METHOD:path
	// of a net/http ServeMux pattern (Request.Pattern) or of gin's FullPath,
	// with "/" turned into "." and other characters outside [A-Za-z0-9._:-]
	// into "_", e.g. POST /orders/:id is "POST:orders.:id". Without either,
	// set it.
	Scope string
	// Settings are the scope's protocol settings; zero fields take the
	// Guard's defaults.
	Settings idemguard.Settings
	// KeyRequired makes the Idempotency-Key header mandatory (400 without
	// it); otherwise the key is derived from the method, path, query and
	// body.
	KeyRequired bool
	// Timeout bounds one execution of the handler (0: none); its context is
	// then cancelled and the key stored failed with stopReason timeout.
	Timeout time.Duration
	// MaxBodyBytes caps the request body (413 above) and the handler's
	// buffered response (a larger one is an error). Defaults to
	// DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// MaxWait caps Prefer: wait=N. Defaults to DefaultMaxWait (30s).
	MaxWait time.Duration
	// RetryAfter is the Retry-After of a 409 (in progress) and of a 429
	// (too many waiters). Defaults to DefaultRetryAfter (1s).
	RetryAfter time.Duration
	// UnavailableRetryAfter is the Retry-After of a 503 (store down).
	// Defaults to DefaultUnavailableRetryAfter (5s).
	UnavailableRetryAfter time.Duration
	// Keep is what of the handler's JSON answer is stored and replayed. nil
	// keeps the idemguard envelope (ok, stopReason, traceId, data with
	// primitive values): right for AI results. sanitize.NewAllowlist keeps
	// the handler's own JSON reduced to the fields the team names (nested
	// paths allowed, e.g. "owner.name", "items[].id"): the route answers as
	// it always did. sanitize.KeepAllBut keeps everything but the blocked
	// keys; it is never the default, a team that wants it says so. The
	// blocked keys (sanitize.BlockedKeys, plus those an allowlist adds) are
	// removed at any depth in every mode, and every removal is logged,
	// counted and named on the key's record.
	Keep *sanitize.Allowlist
	// Headers names the response headers stored and replayed besides
	// Content-Type (with Keep) and Location, compared case-insensitively.
	// Other headers the handler sets reach no caller: the first caller gets
	// exactly what every replay gets. Name Set-Cookie only if a replay may
	// hand the same cookie to whoever sends the key.
	Headers []string
	// Logger receives the middleware's error logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Actor names the caller in the audit trail (Call.Actor): a stable id,
	// never a secret or personal data (hash a person's id with
	// Guard.HashActor). Defaults to idemguard.ActorFrom of the request
	// context, which routers/auth's middleware and the REST API fill in. An
	// actor longer than idemguard.MaxActorLen or not printable answers 500
	// (logged) without running the handler.
	Actor func(*http.Request) string
}

// Validate reports the first option that is missing or out of range.
func (o Options) Validate() error {
	switch {
	case o.Guard == nil:
		return errors.New("middleware: Options.Guard is required")
	case o.MaxBodyBytes < 0, o.MaxWait < 0, o.RetryAfter < 0, o.UnavailableRetryAfter < 0, o.Timeout < 0:
		return errors.New("middleware: Options sizes and durations must not be negative (0 means the default)")
	}
	if o.Scope != "" {
		if err := keys.ValidateScope(o.Scope); err != nil {
			return fmt.Errorf("middleware: Options.Scope: %w", err)
		}
	}
	if err := o.Settings.Validate(); err != nil {
		return fmt.Errorf("middleware: Options.Settings: %w", err)
	}
	return nil
}

// Idempotent returns net/http middleware that runs next at most once per
// (tenant, scope, key) and answers every duplicate with the stored response:
//
//   - the key is the Idempotency-Key header (parsed as by the REST API), or
//     derived from the method, path, query and body; the body must be JSON
//     (empty means {}); the same key with another request is a 422;
//   - the handler's response is buffered, and what is stored of it is what
//     the first caller gets and what every replay gets: its status (2xx, and
//     4xx other than the retryable ones below), its JSON body as Keep says
//     (the idemguard envelope by default, or the handler's own JSON reduced
//     to an allowlist; blocked keys removed at any depth, each removal
//     logged, counted and named on the key record), and its Location and
//     the Headers named. Other headers are not sent. A replay adds
//     Idempotent-Replayed: true and Idempotent-Completed-At. An envelope of
//     a 4xx answer always says ok false;
//   - a duplicate while the handler runs gets 409 with Retry-After, or waits
//     with Prefer: wait=N (429 with Retry-After when too many wait);
//   - a handler answer of 5xx, 408, 409, 429, 401 or 403 is a retryable
//     failure, not a stored response: the caller whose request ran the
//     handler gets the handler's answer as written, the key may run again;
//   - a handler that writes a Content-Type other than JSON, a body that is
//     not a JSON object, more than MaxBodyBytes, or that streams (Flush,
//     Hijack) is a programming error: 500 invalid-result at request time,
//     never a broken replay; a request that accepts text/event-stream is
//     the exception (see stream.go);
//   - errors are the REST API's application/problem+json answers.
//
// The handler runs with the request's context detached from the client (a
// client that hangs up still gets the result on retry); Timeout bounds it.
// Without Options.Scope, the scope comes from the ServeMux pattern that
// matched (Request.Pattern), so wrap the handler given to the mux, not the
// mux. Idempotent panics if o is invalid (see Validate), as route
// registration does for a bad route.
func Idempotent(o Options) func(next http.Handler) http.Handler {
	m := New(o)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			route := r.Pattern
			if i := strings.IndexByte(route, ' '); i >= 0 {
				route = route[i+1:] // the method
			}
			if i := strings.IndexByte(route, '/'); i > 0 {
				route = route[i:] // a host pattern
			}
			m.Serve(w, r, route, next)
		})
	}
}

// Middleware is the guard of one Options, for any router: Idempotent uses
// it with the ServeMux pattern as the route, routers.Idempotent with gin's.
type Middleware struct {
	guard       *idemguard.Guard
	answers     *pipeline.Answers
	limits      pipeline.Limits
	route       pipeline.Route // Scope "" takes each request's route
	keyRequired bool
	headers     []string // canonical names of the headers kept
	tenant      func(*http.Request) (tenancy.ID, error)
	actor       func(*http.Request) string
}

// New validates o and returns its middleware; it panics if o is invalid.
func New(o Options) *Middleware {
	if err := o.Validate(); err != nil {
		panic(err)
	}
	kept := []string{pipeline.HeaderLocation}
	if o.Keep != nil {
		kept = append(kept, "Content-Type")
	}
	for _, name := range o.Headers {
		kept = append(kept, http.CanonicalHeaderKey(name))
	}
	return &Middleware{
		guard: o.Guard,
		answers: pipeline.NewAnswers(cmp.Or(o.RetryAfter, DefaultRetryAfter),
			cmp.Or(o.UnavailableRetryAfter, DefaultUnavailableRetryAfter), cmp.Or(o.Logger, slog.Default())),
		limits: pipeline.Limits{MaxBody: cmp.Or(o.MaxBodyBytes, DefaultMaxBodyBytes),
			MaxWait: cmp.Or(o.MaxWait, DefaultMaxWait)},
		route:       pipeline.Route{Scope: o.Scope, Settings: o.Settings, Timeout: o.Timeout, Keep: o.Keep},
		keyRequired: o.KeyRequired,
		headers:     kept,
		tenant:      o.Tenant,
		actor:       o.Actor,
	}
}

// Serve runs next under the guard for r, whose route template is route
// (/orders/{id}, /orders/:id; "" when the router matched none): the scope
// is Options.Scope, or METHOD:route.
func (m *Middleware) Serve(w http.ResponseWriter, r *http.Request, route string, next http.Handler) {
	in, err := m.read(w, r, route)
	if err != nil {
		m.answers.Fail(w, r, route, err)
		return
	}
	if acceptsEventStream(r) { // stream.go
		m.serveStream(w, in, next)
		return
	}
	res, err := m.guard.Do(in.r.Context(), in.req.Call(in.tenant, in.route, in.inputs()), func(ctx context.Context) (any, error) {
		bw := &bufferedWriter{header: make(http.Header), max: m.limits.MaxBody}
		next.ServeHTTP(bw, in.req.HandlerRequest(ctx, in.r))
		return bw.result(in.route.Keep != nil, m.headers)
	})
	switch {
	case err != nil:
		m.answers.Fail(w, r, route, err)
	case !ranAnswer(w, res):
		m.answers.Result(w, in.req, res)
	}
}

// incoming is a request read and accepted, ready for the guard.
type incoming struct {
	r      *http.Request // with the actor in its context
	tenant tenancy.ID
	route  pipeline.Route
	req    pipeline.Request
}

// inputs are what the key and the fingerprint derive from.
func (in incoming) inputs() map[string]any {
	return map[string]any{"method": in.r.Method, "path": in.r.URL.Path, "query": in.r.URL.RawQuery, "body": in.req.Body}
}

// read checks the actor, the tenant, the scope and the request, in that
// order; nothing refused here reaches the guard.
func (m *Middleware) read(w http.ResponseWriter, r *http.Request, route string) (incoming, error) {
	if m.actor != nil {
		actor := m.actor(r)
		if err := checkActor(actor); err != nil { // a programming error: 500, logged
			return incoming{}, fmt.Errorf("middleware: Options.Actor: %w", err)
		}
		r = r.WithContext(idemguard.WithActor(r.Context(), actor))
	}
	tenant, err := m.tenantOf(r)
	if err != nil {
		return incoming{}, err
	}
	rt := m.route
	if rt.Scope == "" {
		rt.Scope = routeScope(r.Method, route)
	}
	if rt.Scope == "" || keys.ValidateScope(rt.Scope) != nil {
		return incoming{}, fmt.Errorf("%w: the route gives no valid scope; set Options.Scope", pipeline.ErrNoScope)
	}
	req, err := pipeline.Read(w, r, rt.Scope, m.keyRequired, m.limits)
	if err != nil {
		return incoming{}, err
	}
	return incoming{r: r, tenant: tenant, route: rt, req: req}, nil
}

// ranAnswer writes the handler's own retryable answer to the caller whose
// request ran it (handlerAnswer), and reports whether it did.
func ranAnswer(w http.ResponseWriter, res idemguard.Result) bool {
	var answer *handlerAnswer
	if res.Status == idemguard.StatusFailed && !res.Cached && errors.As(res.Err, &answer) {
		answer.write(w)
		return true
	}
	return false
}

// checkActor applies Call.Actor's rule (at most idemguard.MaxActorLen
// printable bytes) to an actor that travels in the context, which the
// engine takes as it is.
func checkActor(a string) error {
	if len(a) > idemguard.MaxActorLen {
		return fmt.Errorf("an actor is at most %d bytes, got %d", idemguard.MaxActorLen, len(a))
	}
	if strings.IndexFunc(a, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return errors.New("an actor is printable text")
	}
	return nil
}

// routeScope turns a route into a scope: METHOD:path, "/" → ".", other
// characters outside the scope alphabet → "_".
func routeScope(method, path string) string {
	if path == "" {
		return ""
	}
	b := []byte(method + ":" + strings.TrimPrefix(path, "/"))
	for i, c := range b {
		switch {
		case c == '/':
			b[i] = '.'
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

func (m *Middleware) tenantOf(r *http.Request) (tenancy.ID, error) {
	if m.tenant == nil {
		if id, ok := tenancy.FromContext(r.Context()); ok {
			return id, nil
		}
		return "", auth.ErrNoCredentials
	}
	id, err := m.tenant(r)
	if err != nil {
		return "", fmt.Errorf("%w: %w", auth.ErrInvalidCredentials, err)
	}
	if _, err := tenancy.ParseID(string(id)); err != nil {
		return "", fmt.Errorf("%w: %w", auth.ErrInvalidCredentials, err)
	}
	return id, nil
}

// bufferedWriter holds a guarded handler's response until the guard has
// stored it. It refuses to stream.
type bufferedWriter struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	max      int64
	overflow bool
	streamed string // what the handler did that streams, if it did
	// capture takes the writes of a handler streaming events to a request
	// that accepts them (idempotent_stream.go); nil otherwise.
	capture *captureWriter
}

var errBufferFull = errors.New("routers: the guarded handler's response is over the body limit")

func (w *bufferedWriter) Header() http.Header { return w.header }

// WriteHeader sets the status until the body is first written.
func (w *bufferedWriter) WriteHeader(code int) {
	if w.body.Len() == 0 && !w.overflow {
		w.status = code
	}
}

func (w *bufferedWriter) Write(p []byte) (int, error) {
	if w.capture != nil && w.capture.streaming(w) {
		return w.capture.write(w, p)
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if int64(w.body.Len()+len(p)) > w.max {
		w.overflow = true
		return 0, errBufferFull
	}
	return w.body.Write(p)
}

// Flush marks the response as streamed: a guarded handler must answer one
// body, which is stored before anything is sent.
func (w *bufferedWriter) Flush() {
	if w.capture != nil && w.capture.streaming(w) {
		return // every complete event is sent as it is written
	}
	if w.streamed == "" {
		w.streamed = "called Flush (streaming)"
	}
}

// Hijack refuses: the connection is not the handler's to take.
func (w *bufferedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.streamed == "" {
		w.streamed = "tried to hijack the connection"
	}
	return nil, nil, errors.New("routers: a handler behind the idempotency middleware cannot hijack the connection")
}

// retryableStatus reports whether a handler's status is a retryable failure
// rather than the answer to the inputs, and the stop reason it is stored with.
func retryableStatus(status int) (sanitize.StopReason, bool) {
	switch {
	case status >= 500:
		return sanitize.ProviderError, true
	case status == http.StatusTooManyRequests:
		return sanitize.RateLimited, true
	case status == http.StatusRequestTimeout:
		return sanitize.Timeout, true
	case status == http.StatusConflict, status == http.StatusUnauthorized, status == http.StatusForbidden:
		return sanitize.ProviderError, true
	}
	return "", false
}

// handlerAnswer is a guarded handler's retryable answer (see retryableStatus):
// the row records a retryable failure, and only the caller whose call ran the
// handler gets this answer, as the handler wrote it.
type handlerAnswer struct {
	status int
	header http.Header
	body   []byte
}

func (a *handlerAnswer) Error() string { return fmt.Sprintf("the handler answered %d", a.status) }

// write sends the handler's answer as written.
func (a *handlerAnswer) write(w http.ResponseWriter) {
	h := w.Header()
	for k, v := range a.header {
		h[k] = v
	}
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(a.status)
	_, _ = w.Write(a.body)
}

// result is the operation's value for what the handler wrote: its status,
// its JSON body (as the raw document to keep when document is true, else
// decoded for the envelope) and the headers named in kept.
func (w *bufferedWriter) result(document bool, kept []string) (any, error) {
	invalid := func(format string, args ...any) error {
		return pipeline.Reject(idemguard.ErrInvalidResult, "the handler "+format+"; a handler behind the idempotency middleware must write one JSON object", args...)
	}
	switch {
	case w.streamed != "":
		return nil, invalid("%s", w.streamed)
	case w.overflow:
		return nil, invalid("wrote more than the limit of %d bytes", w.max)
	}
	status := cmp.Or(w.status, http.StatusOK)
	if reason, retryable := retryableStatus(status); retryable {
		// Not the answer to the inputs: a 5xx, 408 or 429 is a failure of the
		// moment, a 409 depends on the state of the moment, a 401 or 403 on
		// the credentials. Stored as success they would be replayed for the
		// TTL; so the row records a retryable failure, and the caller whose
		// call ran the handler gets the handler's own answer as written (it
		// is not stored, so its body need not be JSON).
		return nil, &idemguard.OpError{Reason: reason, Err: &handlerAnswer{status: status, header: w.header.Clone(), body: bytes.Clone(w.body.Bytes())}}
	}
	if ct := w.header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, invalid("wrote Content-Type %.64q", ct)
		}
	}
	var header http.Header
	for _, name := range kept {
		if v := w.header.Values(name); len(v) > 0 {
			if header == nil {
				header = make(http.Header, len(kept))
			}
			header[name] = append([]string(nil), v...)
		}
	}
	body := bytes.TrimSpace(w.body.Bytes())
	if len(body) == 0 {
		return idemguard.Response{StatusCode: status, Header: header}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return nil, invalid("wrote a body that is not valid JSON")
	}
	if _, ok := v.(map[string]any); !ok && v != nil {
		return nil, invalid("wrote a JSON %s, not an object", jsonKind(v))
	}
	if v == nil {
		return idemguard.Response{StatusCode: status, Header: header}, nil
	}
	if document {
		return idemguard.Response{StatusCode: status, Value: json.RawMessage(body), Header: header}, nil
	}
	return idemguard.Response{StatusCode: status, Value: v, Header: header}, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	}
	return "number"
}
