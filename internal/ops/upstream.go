package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/sanitize"
)

// MaxUpstreamResponseBytes is the largest upstream answer an operation reads;
// a larger one is a provider_error.
const MaxUpstreamResponseBytes = 4 << 20

// MaxIdleConnsPerHost is how many idle connections NewTransport keeps to
// each upstream host. http.DefaultTransport keeps 2: with more calls than
// that in flight, every call past the second dials a new connection and
// closes it afterwards (a TCP, and for a real provider a TLS, handshake per
// call, and a TIME_WAIT socket left behind). Idle connections are only
// kept, never limited: the number in flight is bounded by the requests.
const MaxIdleConnsPerHost = 256

// NewTransport is the transport for upstream calls: http.DefaultTransport's
// settings (proxy from the environment, dial and TLS handshake timeouts,
// HTTP/2 where offered, 90 s idle timeout) with MaxIdleConnsPerHost idle
// connections kept per host, so a steady load reuses its connections.
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = MaxIdleConnsPerHost
	t.MaxIdleConns = 4 * MaxIdleConnsPerHost
	return t
}

// defaultClient sends the requests of operations configured without a client.
var defaultClient = sync.OnceValue(func() *http.Client { return &http.Client{Transport: NewTransport()} })

// errUpstreamTimeout is the cause of an operation's own timeout.
var errUpstreamTimeout = errors.New("upstream timeout")

// StatusError is an upstream's non-2xx answer. Its message holds the status
// only, never the body (which may echo the prompt).
type StatusError struct {
	Upstream   string
	StatusCode int
}

// UpstreamStatus is the upstream's status code, which the guard logs with a
// failed attempt.
func (e *StatusError) UpstreamStatus() int { return e.StatusCode }

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s answered HTTP %d", e.Upstream, e.StatusCode)
}

// reasonForStatus maps an upstream's non-2xx status to a stop reason:
// 429 rate_limited; 408 timeout; 409 (a transient conflict upstream), 401,
// 403 (our credentials, not the caller's input) provider_error; other 4xx
// invalid_input, which the guard stores as final and answers with 422 (the
// same inputs would only be rejected again); everything else provider_error.
func reasonForStatus(code int) sanitize.StopReason {
	switch {
	case code == http.StatusTooManyRequests:
		return sanitize.RateLimited
	case code == http.StatusRequestTimeout:
		return sanitize.Timeout
	case code == http.StatusConflict, code == http.StatusUnauthorized, code == http.StatusForbidden:
		return sanitize.ProviderError
	case code >= 400 && code < 500:
		return sanitize.InvalidInput
	}
	return sanitize.ProviderError
}

// postJSON POSTs body to url and returns the answer's body when the status
// is 2xx. Errors are *idemguard.OpError: for a non-2xx answer with the stop
// reason reasonForStatus gives its status, timeout when no answer came in
// time, provider_error for any other failure. The exception is ctx itself
// ending (the guard's timeout, a lost claim, shutdown): then the plain
// context error is returned, so the guard classifies it.
func postJSON(ctx context.Context, client *http.Client, upstream, url string, timeout time.Duration,
	headers http.Header, body []byte) ([]byte, int, error) {
	callCtx := ctx
	if d, ok := callDeadline(ctx, timeout); ok {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithDeadlineCause(ctx, d, errUpstreamTimeout)
		defer cancel()
	}
	req, err := upstreamRequest(callCtx, upstream, url, "application/json", headers, body)
	if err != nil {
		return nil, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, transportError(ctx, callCtx, upstream, err)
	}
	defer resp.Body.Close()
	b, err := readLimited(resp.Body, resp.ContentLength, MaxUpstreamResponseBytes+1)
	if err != nil {
		return nil, 0, transportError(ctx, callCtx, upstream, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, resp.StatusCode, &idemguard.OpError{Reason: reasonForStatus(resp.StatusCode),
			Err: &StatusError{Upstream: upstream, StatusCode: resp.StatusCode}}
	}
	if len(b) > MaxUpstreamResponseBytes {
		return nil, resp.StatusCode, &idemguard.OpError{Reason: sanitize.ProviderError,
			Err: fmt.Errorf("%s: answer larger than %d bytes", upstream, MaxUpstreamResponseBytes)}
	}
	return b, resp.StatusCode, nil
}

// callDeadline is when a call of timeout (0: none) must end, and whether
// that needs a context of its own: not when ctx ends first anyway (the
// guard's timeout, set before the call with the same duration, always
// does), for which context.WithDeadlineCause would only add a
// cancellation. Its call is then the same without it: the timeout could
// never fire, and ctx ending is the guard's to classify (transportError).
// The body is read and closed before postJSON returns, so no cancel is
// needed at the end.
func callDeadline(ctx context.Context, timeout time.Duration) (time.Time, bool) {
	if timeout <= 0 {
		return time.Time{}, false
	}
	d := time.Now().Add(timeout)
	if cur, ok := ctx.Deadline(); ok && cur.Before(d) {
		return time.Time{}, false // what context.WithDeadline checks too
	}
	return d, true
}

// readPrealloc is the most readLimited allocates before the body's bytes
// arrive: the declared length is the upstream's word, not bytes in hand.
const readPrealloc = 64 << 10

// readLimited is io.ReadAll(io.LimitReader(r, limit)) that, when the
// answer declares its length, starts with a buffer of that size (up to
// readPrealloc) instead of growing one from 512 bytes, and allocates no
// LimitedReader.
func readLimited(r io.Reader, declared, limit int64) ([]byte, error) {
	size := int64(512)
	if declared > 0 {
		size = min(declared, readPrealloc) + 1 // +1: EOF is seen without growing
	}
	b := make([]byte, 0, min(size, limit))
	for int64(len(b)) < limit {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // longer than declared: let append grow it
		}
		n, err := r.Read(b[len(b):min(int64(cap(b)), limit)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// openStream POSTs body asking for an event stream and returns the 2xx
// answer; cancel ends the call's own timeout. Errors are postJSON's.
func openStream(ctx context.Context, client *http.Client, upstream, url string, timeout time.Duration,
	headers http.Header, body []byte) (*http.Response, context.Context, context.CancelFunc, error) {
	callCtx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		callCtx, cancel = context.WithTimeoutCause(ctx, timeout, errUpstreamTimeout)
	}
	req, err := upstreamRequest(callCtx, upstream, url, "text/event-stream", headers, body)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		return nil, nil, nil, transportError(ctx, callCtx, upstream, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		resp.Body.Close()
		cancel()
		return nil, nil, nil, &idemguard.OpError{Reason: reasonForStatus(resp.StatusCode), Err: &StatusError{Upstream: upstream, StatusCode: resp.StatusCode}}
	}
	return resp, callCtx, cancel, nil
}

// upstreamRequest is the POST of a JSON body to url, accepting accept,
// with headers (fixedHeaders: set after Content-Type and Accept, which
// they may replace).
func upstreamRequest(ctx context.Context, upstream, url, accept string, headers http.Header, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, &idemguard.OpError{Reason: sanitize.ProviderError, Err: fmt.Errorf("%s: building the request: %w", upstream, err)}
	}
	// The names are canonical: assigned directly. The values are
	// constants, slices shared by every request (each of length and
	// capacity 1: Set replaces one and Add appends to a copy, so no
	// request can change another's); an accept of another text gets its
	// own.
	req.Header["Content-Type"], req.Header["Accept"] = headerJSON, headerValue(accept)
	for k, v := range headers {
		req.Header[k] = v
	}
	return req, nil
}

// fixedHeaders are the headers m names, as upstreamRequest takes them:
// canonical names (http.Header.Set's), one value each, in slices of
// length and capacity 1 that requests share (an Add to one copies it, a
// Set replaces it; nothing writes into them). Made once per operation, they
// cost a call nothing.
func fixedHeaders(m map[string]string) http.Header {
	h := make(http.Header, len(m))
	for k, v := range m {
		h[http.CanonicalHeaderKey(k)] = []string{v}
	}
	return h
}

// The header values upstreamRequest shares between requests.
var (
	headerJSON        = []string{"application/json"}
	headerEventStream = []string{"text/event-stream"}
)

// headerValue is the one-value header v, shared when it is a constant of
// upstreamRequest.
func headerValue(v string) []string {
	switch v {
	case headerJSON[0]:
		return headerJSON
	case headerEventStream[0]:
		return headerEventStream
	}
	return []string{v}
}

func transportError(ctx, callCtx context.Context, upstream string, err error) error {
	switch {
	case ctx.Err() != nil:
		// The guard stopped us: let it classify (timeout, shutdown, lost claim).
		return fmt.Errorf("%s: %w", upstream, context.Cause(ctx))
	case errors.Is(context.Cause(callCtx), errUpstreamTimeout):
		return &idemguard.OpError{Reason: sanitize.Timeout, Err: fmt.Errorf("%s: no answer in time", upstream)}
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return &idemguard.OpError{Reason: sanitize.Timeout, Err: fmt.Errorf("%s: %w", upstream, err)}
	}
	return &idemguard.OpError{Reason: sanitize.ProviderError, Err: fmt.Errorf("%s: %w", upstream, err)}
}

// invalidInput is the error of inputs an operation cannot use.
func invalidInput(format string, args ...any) error {
	return &idemguard.OpError{Reason: sanitize.InvalidInput, Err: fmt.Errorf(format, args...)}
}

// decodeStrict decodes exactly one JSON value into v, rejecting unknown fields.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
