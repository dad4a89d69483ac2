package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/jsonvalue"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/tenancy"
)

// The REST API and the middleware are doors to one request path: each reads
// a request with Read before the guard runs, builds its idemguard.Call with
// Request.Call, and answers with Answers, so a client cannot tell them apart
// by how they refuse, replay or wait.

// Request is what is read from a request before the guard runs.
type Request struct {
	ClientKey string
	Raw       []byte          // the body as sent
	Body      json.RawMessage // the body as JSON inputs ({} for an empty one)
	Wait      time.Duration   // Prefer: wait, capped
	// WaitApplied: the request asked for a wait, and the answer says so.
	WaitApplied bool
	// LastEventID is the id of the last event of an earlier stream of the
	// key the client received: a streamed answer resumes after it.
	LastEventID string
	// Principal is the caller's key space (idemguard.Call.Principal), set
	// by the entry path after authentication; "" for the tenant's.
	Principal string
	// ForceNew: Idempotency-Force-New: true (idemguard.Call.ForceNew).
	ForceNew bool
}

// Limits bound what Read accepts.
type Limits struct {
	MaxBody int64         // the largest body (413 above)
	MaxWait time.Duration // the cap of Prefer: wait
}

// Read reads the Idempotency-Key (required when keyRequired), the JSON body,
// Prefer: wait and Last-Event-ID, in that order: a request refused here
// never reaches the guard, so it stores no row and burns no key.
func Read(w http.ResponseWriter, r *http.Request, scope string, keyRequired bool, l Limits) (Request, error) {
	key, err := parseIdempotencyKey(r.Header)
	if err != nil {
		return Request{}, err
	}
	if key == "" && keyRequired {
		return Request{}, Reject(ErrMissingKey, "scope %q requires an Idempotency-Key header", scope)
	}
	raw, body, err := readJSONBody(w, r, l.MaxBody)
	if err != nil {
		return Request{}, err
	}
	wait, applied := parsePreferWait(r.Header, l.MaxWait)
	last, err := parseLastEventID(r.Header)
	if err != nil {
		return Request{}, err
	}
	force, err := parseForceNew(r.Header)
	if err != nil {
		return Request{}, err
	}
	return Request{ClientKey: key, Raw: raw, Body: body, Wait: wait, WaitApplied: applied, LastEventID: last, ForceNew: force}, nil
}

// Route is what an entry path knows of the operation a request runs.
type Route struct {
	Scope    string
	Settings idemguard.Settings
	Timeout  time.Duration
	// Keep is how a plain answer is stored (nil: the envelope); a streamed
	// delivery leaves it nil.
	Keep *sanitize.Allowlist
	// Check vets the inputs before the claim (a REST scope's Validate).
	Check func() error
	// Admit takes the execution's place under the tenant's limits before
	// the claim (idemguard.Call.Admit); nil: no limits.
	Admit func(keyHash string) (func(), error)
}

// Call is the one idemguard.Call of every entry path: the request's key and
// wait, the route's scope and settings, run detached from the client (a
// client that hangs up gets the result on retry). Guard.Start ignores the
// wait and implies the detachment.
func (req Request) Call(tenant tenancy.ID, rt Route, inputs any) idemguard.Call {
	return idemguard.Call{
		Tenant:    tenant,
		Scope:     rt.Scope,
		ClientKey: req.ClientKey,
		Principal: req.Principal,
		Inputs:    inputs,
		Settings:  rt.Settings,
		Wait:      req.Wait,
		Timeout:   rt.Timeout,
		Detach:    true,
		Check:     rt.Check,
		Admit:     rt.Admit,
		Keep:      rt.Keep,
		ForceNew:  req.ForceNew,
		// Used by a streamed delivery only.
		LastEventID: req.LastEventID,
	}
}

// HandlerRequest is r as a middleware's guarded handler gets it: the
// context of the guard's execution, and the body as it was read.
func (req Request) HandlerRequest(ctx context.Context, r *http.Request) *http.Request {
	r2 := r.WithContext(ctx)
	r2.Body, r2.ContentLength = io.NopCloser(bytes.NewReader(req.Raw)), int64(len(req.Raw))
	return r2
}

// emptyBody is what an empty request body means.
var emptyBody = json.RawMessage(`{}`)

// readJSONBody reads at most max bytes of JSON: the raw bytes, and the value
// to derive the key from ({} for an empty body).
func readJSONBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, json.RawMessage, error) {
	// The rejection is built only when needed: it formats a message.
	tooLarge := func() error { return Reject(ErrBodyTooLarge, "the body is over the limit of %d bytes", max) }
	if r.ContentLength > max {
		return nil, nil, tooLarge()
	}
	raw, err := readAll(r.Body, r.ContentLength, max)
	if err != nil {
		if errors.Is(err, errOverLimit) {
			overLimit(w)
			return nil, nil, tooLarge()
		}
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) { // a limit of the caller's own
			return nil, nil, tooLarge()
		}
		return nil, nil, Reject(ErrInvalidBody, "the body could not be read")
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return raw, emptyBody, nil
	}
	if err := validJSON(raw); err != nil {
		return nil, nil, err
	}
	return raw, raw, nil
}

// readAllPrealloc is the most readAll allocates before the body's bytes
// arrive: the declared length is the client's word, not bytes in hand.
const readAllPrealloc = 64 << 10

// errOverLimit is readAll's error for a body of more than its max bytes.
var errOverLimit = errors.New("pipeline: body over the limit")

// readAll is io.ReadAll of at most max bytes (errOverLimit past them) that,
// when the request declares its length, starts with a buffer of that size
// (up to readAllPrealloc) instead of growing one from 512 bytes. It limits
// the reads itself: an http.MaxBytesReader per request is an allocation
// (overLimit does what it would do past the limit).
func readAll(r io.Reader, contentLength, max int64) ([]byte, error) {
	over := max + 1 // the bytes read that tell a body over max
	if over < max {
		over = max // max is math.MaxInt64: never over
	}
	if contentLength <= 0 {
		b, err := io.ReadAll(io.LimitReader(r, over))
		if err == nil && int64(len(b)) > max {
			err = errOverLimit
		}
		return b, err
	}
	b := make([]byte, 0, min(contentLength, readAllPrealloc, max)+1) // +1: EOF is seen without growing
	for {
		room := b[len(b):cap(b)]
		if left := over - int64(len(b)); int64(len(room)) > left {
			room = room[:left] // one byte past max says it is over
		}
		n, err := r.Read(room)
		b = b[:len(b)+n]
		switch {
		case int64(len(b)) > max:
			return b, errOverLimit
		case err == io.EOF:
			return b, nil
		case err != nil:
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // longer than declared: let append grow it
		}
	}
}

// overLimit tells w that its request's body was over the limit, as
// http.MaxBytesReader does when a read passes it (net/http's own writer
// then closes the connection after the answer instead of reading the rest):
// through a MaxBytesReader of limit 0 given one byte.
func overLimit(w http.ResponseWriter) {
	var one [1]byte
	_, _ = http.MaxBytesReader(w, io.NopCloser(bytes.NewReader(one[:])), 0).Read(one[:])
}

// validJSON checks that raw holds exactly one JSON value. The error gives the
// byte offset of the problem, never the body's text.
func validJSON(raw []byte) error {
	if !utf8.Valid(raw) {
		// encoding/json would replace invalid bytes with U+FFFD, so two
		// different bodies could derive the same key.
		return Reject(ErrInvalidBody, "the body is not valid UTF-8")
	}
	if jsonvalue.SurelyValid(raw) || json.Valid(raw) {
		return nil
	}
	var v any
	err := json.Unmarshal(raw, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return Reject(ErrInvalidBody, "the body is not valid JSON (syntax error at byte offset %d)", se.Offset)
	}
	return Reject(ErrInvalidBody, "the body is not valid JSON")
}
