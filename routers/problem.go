package routers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/sanitize"
)

// ProblemTypePrefix begins every problem type URI; the rest is the slug
// (docs/openapi.yaml lists them).
const ProblemTypePrefix = "urn:idemguard:problem:"

// Content types of the answers.
const (
	contentJSON    = "application/json"
	contentProblem = "application/problem+json"
)

// problem is an RFC 9457 problem detail with idemguard's envelope fields.
// Its JSON field order is the struct order; it is encoded deterministically.
type problem struct {
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

// requestError is a request the handlers reject before the guard sees it.
// Its detail is shown to the client, so it never holds the client key, the
// body or credentials.
type requestError struct {
	kind   error
	detail string
}

func (e *requestError) Error() string { return e.kind.Error() + ": " + e.detail }
func (e *requestError) Unwrap() error { return e.kind }

func reject(kind error, format string, args ...any) error {
	return &requestError{kind: kind, detail: fmt.Sprintf(format, args...)}
}

// The kinds of requestError.
var (
	errUnknownScope     = errors.New("unknown scope")
	errUnknownRoute     = errors.New("unknown route")
	errMethodNotAllowed = errors.New("method not allowed")
	errMissingKey       = errors.New("missing Idempotency-Key")
	errInvalidKey       = errors.New("invalid Idempotency-Key")
	errDuplicateKey     = errors.New("more than one Idempotency-Key")
	errInvalidRef       = errors.New("invalid key reference")
	errInvalidBody      = errors.New("invalid body")
	errBodyTooLarge     = errors.New("body too large")
	errNotReady         = errors.New("not ready")
	errNoMetrics        = errors.New("metrics not configured")
	errInvalidQuery     = errors.New("invalid query parameter")
	// errTooManyAuthFailures: the client failed to authenticate too often
	// (authlimit.go).
	errTooManyAuthFailures = errors.New("too many failed authentications")
)

// problemFor maps an error to the problem answered for it. It is the only
// place that decides which status an error gets.
func problemFor(err error) problem {
	var re *requestError
	detail := ""
	if errors.As(err, &re) {
		detail = re.detail
	}
	var tooLarge *http.MaxBytesError
	var inputErr *idemguard.InputError
	switch {
	case errors.Is(err, auth.ErrNoCredentials), errors.Is(err, auth.ErrInvalidCredentials):
		return newProblem(http.StatusUnauthorized, "unauthorized", "Unauthorized", sanitize.Unknown, unauthorizedDetail(err))
	case errors.Is(err, errTooManyAuthFailures):
		return newProblem(http.StatusTooManyRequests, "too-many-failed-authentications", "Too many failed authentications",
			sanitize.RateLimited, "too many requests from this client failed to authenticate; retry after the time in Retry-After")
	case errors.Is(err, errUnknownScope):
		return newProblem(http.StatusNotFound, "unknown-scope", "Unknown scope", sanitize.Unknown, detail)
	case errors.Is(err, errUnknownRoute):
		return newProblem(http.StatusNotFound, "unknown-route", "Not found", sanitize.Unknown, detail)
	case errors.Is(err, idemguard.ErrNotFound):
		return newProblem(http.StatusNotFound, "key-not-found", "Key not found", sanitize.Unknown,
			"no record of this key in this scope for your tenant (absent or expired)")
	case errors.Is(err, errMethodNotAllowed):
		return newProblem(http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed", sanitize.Unknown, detail)
	case errors.Is(err, errMissingKey):
		return newProblem(http.StatusBadRequest, "missing-idempotency-key", "Missing Idempotency-Key", sanitize.InvalidInput, detail)
	case errors.Is(err, errInvalidKey), errors.Is(err, errDuplicateKey):
		return newProblem(http.StatusBadRequest, "invalid-idempotency-key", "Invalid Idempotency-Key", sanitize.InvalidInput, detail)
	case errors.Is(err, errInvalidRef):
		return newProblem(http.StatusBadRequest, "invalid-key-reference", "Invalid key reference", sanitize.InvalidInput, detail)
	case errors.As(err, &tooLarge), errors.Is(err, errBodyTooLarge):
		return newProblem(http.StatusRequestEntityTooLarge, "body-too-large", "Body too large", sanitize.InvalidInput, detail)
	case errors.Is(err, errInvalidBody):
		return newProblem(http.StatusBadRequest, "invalid-body", "Invalid body", sanitize.InvalidInput, detail)
	case errors.Is(err, idemguard.ErrKeyFinished):
		return newProblem(http.StatusConflict, "key-finished", "Key finished", sanitize.Unknown,
			"this key's answer is stored; there is nothing running to cancel")
	case errors.Is(err, idemguard.ErrTooManyWatchers):
		return newProblem(http.StatusTooManyRequests, "too-many-waiters", "Too many watchers", sanitize.RateLimited,
			"this key, or your tenant, has as many open event streams on this server as it allows; close one, or poll the key record")
	case errors.Is(err, errInvalidQuery):
		return newProblem(http.StatusBadRequest, "invalid-query", "Invalid query parameter", sanitize.InvalidInput, detail)
	case errors.Is(err, idemguard.ErrFingerprintMismatch):
		return newProblem(http.StatusUnprocessableEntity, "idempotency-key-reused", "Idempotency-Key reused with other inputs", sanitize.InvalidInput,
			"this Idempotency-Key was already used with a different request body; use a new key for a new request")
	case errors.As(err, &inputErr) && len(inputErr.Fields) > 0:
		return inputProblem(inputErr)
	case errors.Is(err, idemguard.ErrInvalidInput):
		// The router validates everything the guard does, so this is rare;
		// the engine's message may quote the input, so it is not shown.
		return newProblem(http.StatusBadRequest, "invalid-input", "Invalid input", sanitize.InvalidInput,
			"the request was rejected as invalid input")
	case errors.Is(err, idemguard.ErrInvalidResult):
		// A bug in the operation (or the wrapped handler), never an
		// upstream failure: it has been logged where it happened.
		if detail == "" {
			detail = "the operation returned something other than a JSON object; it has been logged, and the key may run again once fixed"
		}
		return newProblem(http.StatusInternalServerError, "invalid-result", "Invalid operation result", sanitize.Unknown, detail)
	case errors.Is(err, errNoScope):
		return newProblem(http.StatusInternalServerError, "internal", "Internal server error", sanitize.Unknown,
			"an unexpected error; it has been logged")
	case errors.Is(err, idemguard.ErrTooManyWaiters):
		return newProblem(http.StatusTooManyRequests, "too-many-waiters", "Too many waiting requests", sanitize.InProgress,
			"too many requests already wait for this key's running operation; retry after Retry-After seconds, without Prefer: wait")
	case errors.Is(err, idemguard.ErrStoreUnavailable):
		return newProblem(http.StatusServiceUnavailable, "store-unavailable", "Store unavailable", sanitize.Unknown,
			"the idempotency store cannot be reached; nothing was run; retry after Retry-After seconds")
	case errors.Is(err, errNotReady):
		return newProblem(http.StatusServiceUnavailable, "not-ready", "Not ready", sanitize.Unknown, detail)
	case errors.Is(err, errNoMetrics):
		return newProblem(http.StatusNotFound, "unknown-route", "Not found", sanitize.Unknown, detail)
	}
	return newProblem(http.StatusInternalServerError, "internal", "Internal server error", sanitize.Unknown,
		"an unexpected error; it has been logged")
}

func newProblem(status int, slug, title string, reason sanitize.StopReason, detail string) problem {
	return problem{Type: ProblemTypePrefix + slug, Title: title, Status: status, Detail: detail, StopReason: reason}
}

// resultProblem is the answer for a guard result that is not a success: an
// operation in progress (409) or failed (its stored status, 502). It depends
// only on the status, stopReason and cached, so a replayed failure equals the
// first answer except for "cached".
func resultProblem(res idemguard.Result) problem {
	cached := res.Cached
	if res.Status == idemguard.StatusInProgress {
		p := newProblem(http.StatusConflict, "in-progress", "Operation in progress", sanitize.InProgress,
			"a request with this key is running the operation; retry after Retry-After seconds, or send Prefer: wait=N to wait for its result")
		p.Cached = &cached
		return p
	}
	status := res.StatusCode
	if status < 400 || status > 599 {
		status = http.StatusBadGateway
	}
	reason := sanitize.ParseStopReason(string(res.StopReason))
	p := newProblem(status, "operation-failed", "Operation failed", reason, failureDetail(reason))
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

// encodeJSON encodes v without HTML escaping and without a trailing newline.
func encodeJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only our own plain structs are encoded here.
		panic(fmt.Sprintf("routers: encode %T: %v", v, err))
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func writeProblem(c *gin.Context, p problem) {
	c.Set(stopReasonKey, string(p.StopReason))
	c.Data(p.Status, contentProblem, encodeJSON(p))
}

// writeProblemHTTP is writeProblem for net/http.
func writeProblemHTTP(w http.ResponseWriter, p problem) {
	body := encodeJSON(p)
	w.Header().Set("Content-Type", contentProblem)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// fail answers err as a problem and stops the handler chain. 5xx are
// logged here, where they are handled; the guard has already logged store
// failures with their cause.
func (h *handlers) fail(c *gin.Context, err error) {
	p := problemFor(err)
	switch p.Status {
	case http.StatusServiceUnavailable:
		c.Header(headerRetryAfter, h.unavailableRetryAfter)
	case http.StatusTooManyRequests:
		c.Header(headerRetryAfter, h.retryAfter)
	case http.StatusInternalServerError:
		h.log.Error("http: unexpected error", slog.String("route", c.FullPath()), slog.Any("err", err))
	}
	writeProblem(c, p)
	c.Abort()
}
