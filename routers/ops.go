package routers

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/tenancy"
)

// derivedRefPrefix marks a key reference that is a key hash (a derived key)
// rather than a client key; it is not a client-key character.
const derivedRefPrefix = "~"

// emptyBody is what an empty request body means.
var emptyBody = json.RawMessage(`{}`)

// runOperation serves POST /v1/ops/:scope. The checks run in the order of
// the package documentation, so no rejected request stores a row or runs
// the operation.
func (h *handlers) runOperation(c *gin.Context) {
	tenant, ok := tenantOf(c)
	if !ok {
		h.fail(c, auth.ErrNoCredentials)
		return
	}
	scope, ok := h.scope(c)
	if !ok {
		return
	}
	clientKey, err := parseIdempotencyKey(c.Request.Header)
	if err != nil {
		h.fail(c, err)
		return
	}
	if clientKey == "" && scope.KeyRequired {
		h.fail(c, reject(errMissingKey, "scope %q requires an Idempotency-Key header", scope.Name))
		return
	}
	body, err := h.readBody(c)
	if err != nil {
		h.fail(c, err)
		return
	}
	if scope.Stream != nil { // stream.go
		var streaming bool
		if body, streaming, err = deliveryMode(body); err != nil {
			h.fail(c, err)
			return
		} else if streaming {
			h.runStream(c, tenant, scope, clientKey, body)
			return
		}
	}
	wait, waitApplied := parsePreferWait(c.Request.Header, h.maxWait)

	run := scope.Run
	res, err := h.guard.Do(c.Request.Context(), idemguard.Call{
		Tenant:    tenant,
		Scope:     scope.Name,
		ClientKey: clientKey,
		Inputs:    body,
		Settings:  scope.Settings,
		Wait:      wait,
		Timeout:   scope.Timeout,
		Detach:    true,
	}, func(ctx context.Context) (any, error) { return run(ctx, body) })
	if err != nil {
		if clientKey != "" {
			h.setRef(c, scope.Name, clientKey)
		}
		h.fail(c, err)
		return
	}

	ref := clientKey
	if ref == "" {
		ref = derivedRefPrefix + res.KeyHash
	}
	h.setRef(c, scope.Name, ref)
	c.Set(keyHashKey, shortHash(res.KeyHash))
	if waitApplied {
		c.Header(headerPreferenceApplied, preferenceApplied(wait))
	}
	if res.Cached {
		c.Set(replayedKey, true)
		c.Header(headerReplayed, "true")
		if !res.CompletedAt.IsZero() {
			c.Header(headerCompletedAt, formatTime(res.CompletedAt))
		}
	}

	switch res.Status {
	case idemguard.StatusSucceeded:
		c.Set(stopReasonKey, string(res.StopReason))
		c.Data(res.StatusCode, contentJSON, res.Body)
	case idemguard.StatusInProgress:
		c.Header(headerRetryAfter, h.retryAfter)
		writeProblem(c, resultProblem(res))
	default:
		writeProblem(c, resultProblem(res))
	}
}

// scope returns the scope named in the path, or answers 404.
func (h *handlers) scope(c *gin.Context) (*Scope, bool) {
	s, ok := h.scopes[c.Param("scope")]
	if !ok {
		// The unknown name is not echoed: it is the caller's text.
		h.fail(c, reject(errUnknownScope, "no operation is registered under this scope"))
		return nil, false
	}
	c.Set(scopeKey, s.Name)
	return s, true
}

// readBody reads at most maxBody bytes of JSON. An empty body is {}.
func (h *handlers) readBody(c *gin.Context) (json.RawMessage, error) {
	_, body, err := readJSONBody(c.Writer, c.Request, h.maxBody)
	return body, err
}

// validJSON checks that raw holds exactly one JSON value. The error gives the
// byte offset of the problem, never the body's text.
func validJSON(raw []byte) error {
	if !utf8.Valid(raw) {
		// encoding/json would replace invalid bytes with U+FFFD, so two
		// different bodies could derive the same key.
		return reject(errInvalidBody, "the body is not valid UTF-8")
	}
	if json.Valid(raw) {
		return nil
	}
	var v any
	err := json.Unmarshal(raw, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return reject(errInvalidBody, "the body is not valid JSON (syntax error at byte offset %d)", se.Offset)
	}
	return reject(errInvalidBody, "the body is not valid JSON")
}

// setRef adds the key reference headers.
func (h *handlers) setRef(c *gin.Context, scope, ref string) {
	c.Header(headerLocation, h.locationPrefix+keyPath(scope, ref))
	c.Header(headerKeyRef, ref)
}

// keyPath is the lookup path of a key, after Options.Prefix. Scopes and
// refs hold only [A-Za-z0-9._:~-], which need no escaping in a path after
// the first segment.
func keyPath(scope, ref string) string {
	return "/v1/ops/" + scope + "/keys/" + ref
}

// shortHash is the prefix of a key hash that logs carry.
func shortHash(h string) string { return h[:min(12, len(h))] }

func tenantOf(c *gin.Context) (tenancy.ID, bool) {
	return tenancy.FromContext(c.Request.Context())
}

// formatTime renders t as RFC 3339 in UTC, with its sub-second digits.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// keyRecord is the answer of GET /v1/ops/:scope/keys/:key. Its JSON names are camelCase, like
// the envelope's (stopReason, traceId); openapi_test.go checks both the document and this answer.
type keyRecord struct {
	Ref          string          `json:"ref"`
	Scope        string          `json:"scope"`
	Status       string          `json:"status"`
	AttemptCount int             `json:"attemptCount"`
	CreatedAt    string          `json:"createdAt,omitempty"`
	StartedAt    string          `json:"startedAt,omitempty"`
	HeartbeatAt  string          `json:"heartbeatAt,omitempty"`
	CompletedAt  string          `json:"completedAt,omitempty"`
	ExpiresAt    string          `json:"expiresAt,omitempty"`
	Response     json.RawMessage `json:"response,omitempty"`
	ResponseCode int             `json:"responseCode,omitempty"`
	StreamEvents string          `json:"streamEvents,omitempty"`
}

// lookupKey serves GET /v1/ops/:scope/keys/:key. The key is a client key or
// "~" and a key hash. Another tenant's key is a 404, like an absent one.
func (h *handlers) lookupKey(c *gin.Context) {
	tenant, ok := tenantOf(c)
	if !ok {
		h.fail(c, auth.ErrNoCredentials)
		return
	}
	scope, ok := h.scope(c)
	if !ok {
		return
	}
	ref := c.Param("key")
	var (
		info idemguard.KeyInfo
		err  error
	)
	if hash, derived := strings.CutPrefix(ref, derivedRefPrefix); derived {
		if !isKeyHash(hash) {
			h.fail(c, reject(errInvalidRef, "a derived key reference is ~ followed by the 64 lower-case hex digits of the key hash"))
			return
		}
		c.Set(keyHashKey, shortHash(hash))
		info, err = h.guard.LookupHash(c.Request.Context(), tenant, scope.Name, hash)
	} else {
		if err := keys.ValidateClientKey(ref); err != nil {
			h.fail(c, reject(errInvalidRef, "a key reference is an Idempotency-Key (1 to %d characters of [A-Za-z0-9_.:-]) or ~ followed by a key hash", keys.MaxClientKeyLen))
			return
		}
		info, err = h.guard.Lookup(c.Request.Context(), tenant, scope.Name, ref)
	}
	if err != nil {
		h.fail(c, err)
		return
	}
	c.Set(keyHashKey, shortHash(info.KeyHash))

	rec := keyRecord{
		Ref: ref, Scope: scope.Name, Status: string(info.Status), AttemptCount: info.Attempts,
		CreatedAt: optTime(info.CreatedAt), StartedAt: optTime(info.StartedAt), HeartbeatAt: optTime(info.HeartbeatAt),
		CompletedAt: optTime(info.CompletedAt), ExpiresAt: optTime(info.ExpiresAt),
	}
	if info.Envelope != nil {
		body, err := sanitize.Marshal(*info.Envelope)
		if err != nil {
			h.fail(c, err)
			return
		}
		rec.Response, rec.ResponseCode, rec.StreamEvents = body, info.StatusCode, info.StreamEvents
	}
	c.Data(http.StatusOK, contentJSON, encodeJSON(rec))
}

func optTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return formatTime(t)
}

// isKeyHash reports whether s is 64 lower-case hex digits (a key hash).
func isKeyHash(s string) bool {
	if len(s) != 64 || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
