package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// ProblemTypePrefix begins every Problem type URI; the rest is the slug
// (docs/openapi.yaml lists them).
const ProblemTypePrefix = "urn:idemguard:problem:"

// SlugUnknownModel is the problem type of a model no door's scope runs.
const SlugUnknownModel = "unknown-model"

// slugInProgress is the problem type of a key whose operation runs.
const slugInProgress = "in-progress"

// slugOperationFailed is the problem type of an operation's failure.
const slugOperationFailed = "operation-failed"

// Content types of the answers.
const (
	ContentJSON    = "application/json"
	ContentProblem = "application/problem+json"
)

// Problem is an RFC 9457 Problem detail with idemguard's envelope fields.
// Its JSON field order is the struct order; it is encoded deterministically.
type Problem struct {
	Type       string              `json:"type"`
	Title      string              `json:"title"`
	Status     int                 `json:"status"`
	Detail     string              `json:"detail,omitempty"`
	OK         bool                `json:"ok"`
	StopReason sanitize.StopReason `json:"stopReason"`
	// Cached is set on answers of the guard (409, operation failures) only.
	Cached *bool `json:"cached,omitempty"`
	// Errors lists the fields of inputs that fail their operation's schema
	// (400 invalid-input only).
	Errors []idemguard.FieldError `json:"errors,omitempty"`
}

// RequestError is a request the handlers reject before the guard sees it.
// Its detail is shown to the client, so it never holds the client key, the
// body or credentials.
type RequestError struct {
	kind   error
	detail string
}

func (e *RequestError) Error() string { return e.kind.Error() + ": " + e.detail }
func (e *RequestError) Unwrap() error { return e.kind }

// Reject is a RequestError of kind whose detail is the formatted text.
func Reject(kind error, format string, args ...any) error {
	return &RequestError{kind: kind, detail: fmt.Sprintf(format, args...)}
}

// The kinds of RequestError.
var (
	ErrUnknownScope = errors.New("unknown scope")
	// ErrUnknownModel: a provider door serves no scope for the model.
	ErrUnknownModel     = errors.New("unknown model")
	ErrUnknownRoute     = errors.New("unknown route")
	ErrMethodNotAllowed = errors.New("method not allowed")
	ErrMissingKey       = errors.New("missing Idempotency-Key")
	ErrInvalidKey       = errors.New("invalid Idempotency-Key")
	ErrDuplicateKey     = errors.New("more than one Idempotency-Key")
	ErrInvalidRef       = errors.New("invalid key reference")
	ErrInvalidBody      = errors.New("invalid body")
	ErrBodyTooLarge     = errors.New("body too large")
	ErrNotReady         = errors.New("not ready")
	ErrNoMetrics        = errors.New("metrics not configured")
	ErrInvalidQuery     = errors.New("invalid query parameter")
	// ErrInvalidForceNew: an Idempotency-Force-New that is not "true" or "false".
	ErrInvalidForceNew = errors.New("invalid Idempotency-Force-New")
	// ErrInvalidLastEventID: a Last-Event-ID that no stream event carries.
	ErrInvalidLastEventID = errors.New("invalid Last-Event-ID")
	// ErrTooManyAuthFailures: the client failed to authenticate too often.
	ErrTooManyAuthFailures = errors.New("too many failed authentications")
	// ErrNoScope is a middleware without a scope on a route without a template.
	ErrNoScope = errors.New("no scope")
)

// ProblemFor maps an error to the problem answered for it. It is the only
// place that decides which status an error gets: the cases that need more
// than the error's kind here, then the table of kinds (kindProblems).
func ProblemFor(err error) Problem {
	var re *RequestError
	detail := ""
	if errors.As(err, &re) {
		detail = re.detail
	}
	var tooLarge *http.MaxBytesError
	var inputErr *idemguard.InputError
	var limitErr *LimitError
	switch {
	case errors.As(err, &limitErr):
		if p, ok := limitProblems[limitErr.Limit]; ok {
			return p
		}
	case errors.Is(err, auth.ErrNoCredentials), errors.Is(err, auth.ErrInvalidCredentials):
		return NewProblem(http.StatusUnauthorized, "unauthorized", "Unauthorized", sanitize.Unknown, unauthorizedDetail(err))
	case errors.As(err, &tooLarge):
		return NewProblem(http.StatusRequestEntityTooLarge, "body-too-large", "Body too large", sanitize.InvalidInput, detail)
	case errors.As(err, &inputErr) && len(inputErr.Fields) > 0:
		return inputProblem(inputErr)
	case errors.Is(err, idemguard.ErrInvalidResult) && detail == "":
		// A bug in the operation (or the wrapped handler), never an
		// upstream failure: it has been logged where it happened.
		detail = "the operation returned something other than a JSON object; it has been logged, and the key may run again once fixed"
	}
	for _, k := range kindProblems {
		if errors.Is(err, k.kind) {
			p := k.problem
			if p.Detail == "" {
				p.Detail = detail
			}
			return p
		}
	}
	return NewProblem(http.StatusInternalServerError, "internal", "Internal server error", sanitize.Unknown,
		"an unexpected error; it has been logged")
}

// kindProblems are the problems of the error kinds, tried in order. A
// problem without a detail takes the RequestError's.
var kindProblems = []struct {
	kind    error
	problem Problem
}{
	{ErrTooManyAuthFailures, NewProblem(http.StatusTooManyRequests, "too-many-failed-authentications", "Too many failed authentications",
		sanitize.RateLimited, "too many requests from this client failed to authenticate; retry after the time in Retry-After")},
	{ErrUnknownScope, NewProblem(http.StatusNotFound, "unknown-scope", "Unknown scope", sanitize.Unknown, "")},
	{ErrUnknownModel, NewProblem(http.StatusNotFound, SlugUnknownModel, "Unknown model", sanitize.Unknown, "")},
	{ErrUnknownRoute, NewProblem(http.StatusNotFound, "unknown-route", "Not found", sanitize.Unknown, "")},
	{idemguard.ErrNotFound, NewProblem(http.StatusNotFound, "key-not-found", "Key not found", sanitize.Unknown,
		"no record of this key in this scope for your tenant (absent or expired)")},
	{ErrMethodNotAllowed, NewProblem(http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed", sanitize.Unknown, "")},
	{ErrMissingKey, NewProblem(http.StatusBadRequest, "missing-idempotency-key", "Missing Idempotency-Key", sanitize.InvalidInput, "")},
	{ErrInvalidKey, NewProblem(http.StatusBadRequest, "invalid-idempotency-key", "Invalid Idempotency-Key", sanitize.InvalidInput, "")},
	{ErrDuplicateKey, NewProblem(http.StatusBadRequest, "invalid-idempotency-key", "Invalid Idempotency-Key", sanitize.InvalidInput, "")},
	{ErrInvalidRef, NewProblem(http.StatusBadRequest, "invalid-key-reference", "Invalid key reference", sanitize.InvalidInput, "")},
	{ErrBodyTooLarge, NewProblem(http.StatusRequestEntityTooLarge, "body-too-large", "Body too large", sanitize.InvalidInput, "")},
	{ErrInvalidBody, NewProblem(http.StatusBadRequest, "invalid-body", "Invalid body", sanitize.InvalidInput, "")},
	{ErrInvalidForceNew, NewProblem(http.StatusBadRequest, "invalid-force-new", "Invalid Idempotency-Force-New", sanitize.InvalidInput, "")},
	{store.ErrKeyRunning, NewProblem(http.StatusConflict, "key-running", "Key running", sanitize.InProgress,
		"this key's operation is running; cancel it first (POST …/cancel), then reset it once it has stopped")},
	{store.ErrResetForbidden, NewProblem(http.StatusForbidden, "reset-forbidden", "Reset forbidden", sanitize.Unknown,
		"this scope does not allow resets or forced runs (allow_reset: false); nothing was changed or run")},
	{idemguard.ErrKeyFinished, NewProblem(http.StatusConflict, "key-finished", "Key finished", sanitize.Unknown,
		"this key's answer is stored; there is nothing running to cancel")},
	{idemguard.ErrTooManyWatchers, NewProblem(http.StatusTooManyRequests, "too-many-waiters", "Too many watchers", sanitize.RateLimited,
		"this key, or your tenant, has as many open event streams on this server as it allows; close one, or poll the key record")},
	{ErrInvalidLastEventID, NewProblem(http.StatusBadRequest, "invalid-last-event-id", "Invalid Last-Event-ID", sanitize.InvalidInput, "")},
	{idemguard.ErrTooManyLiveStreams, NewProblem(http.StatusServiceUnavailable, "too-many-live-streams", "Too many live streams", sanitize.Unknown,
		"this server runs as many streamed answers as it allows; nothing was run; retry after Retry-After seconds")},
	{ErrInvalidQuery, NewProblem(http.StatusBadRequest, "invalid-query", "Invalid query parameter", sanitize.InvalidInput, "")},
	{idemguard.ErrFingerprintMismatch, NewProblem(http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency-Key reused with other inputs", sanitize.InvalidInput,
		"this Idempotency-Key was already used with a different request body; use a new key for a new request")},
	// The router validates everything the guard does, so this is rare; the
	// engine's message may quote the input, so it is not shown.
	{idemguard.ErrInvalidInput, NewProblem(http.StatusBadRequest, "invalid-input", "Invalid input", sanitize.InvalidInput,
		"the request was rejected as invalid input")},
	{idemguard.ErrInvalidResult, NewProblem(http.StatusInternalServerError, "invalid-result", "Invalid operation result", sanitize.Unknown, "")},
	{ErrNoScope, NewProblem(http.StatusInternalServerError, "internal", "Internal server error", sanitize.Unknown,
		"an unexpected error; it has been logged")},
	{idemguard.ErrTooManyWaiters, NewProblem(http.StatusTooManyRequests, "too-many-waiters", "Too many waiting requests", sanitize.InProgress,
		"too many requests already wait for this key's running operation; retry after Retry-After seconds, without Prefer: wait")},
	{idemguard.ErrStoreUnavailable, NewProblem(http.StatusServiceUnavailable, "store-unavailable", "Store unavailable", sanitize.Unknown,
		"the idempotency store cannot be reached; nothing was run; retry after Retry-After seconds")},
	{ErrNotReady, NewProblem(http.StatusServiceUnavailable, "not-ready", "Not ready", sanitize.Unknown, "")},
	{ErrNoMetrics, NewProblem(http.StatusNotFound, "unknown-route", "Not found", sanitize.Unknown, "")},
}

// NewProblem is a problem of type ProblemTypePrefix+slug.
func NewProblem(status int, slug, title string, reason sanitize.StopReason, detail string) Problem {
	return Problem{Type: ProblemTypePrefix + slug, Title: title, Status: status, Detail: detail, StopReason: reason}
}

// ResultProblem is the answer for a guard result that is not a success: an
// operation in progress (409) or failed (its stored status, 502). It depends
// only on the status, stopReason and cached, so a replayed failure equals the
// first answer except for "cached".
func ResultProblem(res idemguard.Result) Problem {
	cached := res.Cached
	if res.Status == idemguard.StatusInProgress {
		p := NewProblem(http.StatusConflict, slugInProgress, "Operation in progress", sanitize.InProgress,
			"a request with this key is running the operation; retry after Retry-After seconds, or send Prefer: wait=N to wait for its result")
		p.Cached = &cached
		return p
	}
	status := res.StatusCode
	if status < 400 || status > 599 {
		status = http.StatusBadGateway
	}
	reason := sanitize.ParseStopReason(string(res.StopReason))
	p := NewProblem(status, slugOperationFailed, "Operation failed", reason, failureDetail(reason))
	p.Cached = &cached
	return p
}

func failureDetail(r sanitize.StopReason) string {
	const retry = "; a request with the same Idempotency-Key runs it again while attempts remain"
	switch r {
	case sanitize.ProviderError:
		return "the operation's upstream provider failed" + retry
	case sanitize.Timeout:
		return "the operation did not finish in time" + retry
	case sanitize.RateLimited:
		return "the operation's upstream provider refused it as rate limited" + retry
	case sanitize.RetryLimit:
		return "the operation failed and has no attempts left; use a new Idempotency-Key to run it again"
	case sanitize.Abandoned:
		return "an earlier run of the operation was cut off, and this scope never runs an operation twice; use a new Idempotency-Key"
	case sanitize.InvalidInput:
		return "the operation's upstream rejected these inputs; it is not run again with them"
	case sanitize.Canceled:
		return "the operation was canceled on request" + retry
	}
	return "the operation failed" + retry
}

// EncodeJSON encodes v without HTML escaping and without a trailing newline.
func EncodeJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only our own plain structs are encoded here.
		panic(fmt.Sprintf("routers: encode %T: %v", v, err))
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// maxListedFieldErrors caps the errors member of a 400: a body with a
// thousand bad messages need not be answered a thousand times.
const maxListedFieldErrors = 20

// inputProblem is the 400 of an *idemguard.InputError: its detail names
// the first field, its errors member lists them all (RFC 9457 §3.2
// extension member, one {pointer, detail} per field).
func inputProblem(ie *idemguard.InputError) Problem {
	fields := ie.Fields[:min(len(ie.Fields), maxListedFieldErrors)]
	first := fields[0]
	where := "the body"
	if first.Pointer != "" {
		where = first.Pointer
	}
	detail := fmt.Sprintf("the inputs do not fit the operation's schema: %s %s", where, first.Detail)
	if n := len(ie.Fields) - 1; n > 0 {
		detail += fmt.Sprintf(" (and %d more; see errors)", n)
	}
	p := NewProblem(http.StatusBadRequest, "invalid-input", "Invalid input", sanitize.InvalidInput, detail)
	p.Errors = fields
	return p
}
