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
	tenant, scope, ok := h.tenantScope(c)
	if !ok {
		return
	}
	req, err := readGuarded(c.Writer, c.Request, scope.Name, scope.KeyRequired, h.maxBody, h.maxWait)
	if err != nil {
		h.fail(c, err)
		return
	}
	if scope.Stream != nil { // stream.go: "stream" is how to deliver, not what to run
		var streaming bool
		if req.body, streaming, err = deliveryMode(req.body); err != nil {
			h.fail(c, err)
			return
		} else if streaming && !prefersAsync(c.Request.Header) {
			h.runStream(c, tenant, scope, req)
			return
		}
	}
	if prefersAsync(c.Request.Header) {
		h.runAsync(c, tenant, scope, req)
		return
	}

	run, body := scope.Run, req.body
	res, err := h.guard.Do(c.Request.Context(), idemguard.Call{
		Tenant:    tenant,
		Scope:     scope.Name,
		ClientKey: req.clientKey,
		Inputs:    body,
		Settings:  scope.Settings,
		Wait:      req.wait,
		Timeout:   scope.Timeout,
		Detach:    true,
		Check:     inputCheck(scope, body),
	}, func(ctx context.Context) (any, error) { return run(ctx, body) })
	if err != nil {
		var ie *idemguard.InputError
		if req.clientKey != "" && !errors.As(err, &ie) { // inputs refused before the claim name no key
			h.setRef(c, scope.Name, req.clientKey)
		}
		h.fail(c, err)
		return
	}

	ref := req.clientKey
	if ref == "" {
		ref = derivedRefPrefix + res.KeyHash
	}
	h.setRef(c, scope.Name, ref)
	c.Set(keyHashKey, shortHash(res.KeyHash))
	c.Set(stopReasonKey, string(res.StopReason))
	if res.Cached {
		c.Set(replayedKey, true)
	}
	// The operations of the REST API return no headers: the Location set
	// above, the key's record, is the one a client follows.
	res.Header = nil
	writeResult(c.Writer, req, res, h.retryAfter)
}

// tenantScope returns the caller's tenant and the scope named in the path,
// or answers 401 or 404.
func (h *handlers) tenantScope(c *gin.Context) (tenancy.ID, *Scope, bool) {
	tenant, ok := tenantOf(c)
	if !ok {
		h.fail(c, auth.ErrNoCredentials)
		return "", nil, false
	}
	scope, ok := h.scope(c)
	return tenant, scope, ok
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
	// Stale, CancelRequested and Next describe a running key (jobs.go).
	Stale           bool   `json:"stale,omitempty"`
	CancelRequested bool   `json:"cancelRequested,omitempty"`
	Next            string `json:"next,omitempty"`
	// DroppedFields names the fields removed from the stored answer.
	DroppedFields []string `json:"droppedFields,omitempty"`
	// SecretID names the secret the key's hash was made with (the id, never
	// the secret); absent for the unnamed secret.
	SecretID string `json:"secretId,omitempty"`
	// StreamEvents is "stored" or "dropped" for a key completed by a stream.
	StreamEvents string `json:"streamEvents,omitempty"`
}

// lookupKey serves GET /v1/ops/:scope/keys/:key. The key is a client key or
// "~" and a key hash. Another tenant's key is a 404, like an absent one.
func (h *handlers) lookupKey(c *gin.Context) {
	tenant, scope, ok := h.tenantScope(c)
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
		var key idemguard.Key
		if key, err = h.guard.KeyOfHash(tenant, scope.Name, hash); err == nil {
			info, err = h.guard.Lookup(c.Request.Context(), key)
		}
	} else {
		key, kerr := h.guard.Key(tenant, scope.Name, ref)
		if kerr != nil {
			h.fail(c, reject(errInvalidRef, "a key reference is an Idempotency-Key (1 to %d characters of [A-Za-z0-9_.:-]) or ~ followed by a key hash", keys.MaxClientKeyLen))
			return
		}
		info, err = h.guard.Lookup(c.Request.Context(), key)
	}
	if err != nil {
		h.fail(c, err)
		return
	}
	c.Set(keyHashKey, shortHash(info.KeyHash))

	rec, err := keyRecordOf(ref, scope.Name, info)
	if err != nil {
		h.fail(c, err)
		return
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
