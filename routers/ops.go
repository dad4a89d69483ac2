package routers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/tenancy"
)

// runOperation serves POST /v1/ops/:scope. The checks run in the order of
// the package documentation, so no rejected request stores a row or runs
// the operation; then the request's delivery (plain, background, stream)
// answers it.
func (h *handlers) runOperation(c *gin.Context) {
	tenant, scope, ok := h.tenantScope(c)
	if !ok {
		return
	}
	req, err := pipeline.Read(c.Writer, c.Request, scope.Name, scope.KeyRequired, h.limits)
	if err != nil {
		h.fail(c, err)
		return
	}
	req.Principal = principalFrom(c)
	deliver, err := h.delivery(c.Request.Header, scope, &req)
	if err != nil {
		h.fail(c, err)
		return
	}
	deliver(h, c, tenant, scope, req)
}

// delivery is how the request asks to be answered: a stream (stream.go:
// "stream" in the body of a scope with a Stream operation says how to
// deliver, not what to run, and is taken out of req.Body), in the
// background (Prefer: respond-async, jobs.go), or plainly. It returns a
// method expression, which unlike a method value costs no allocation.
func (h *handlers) delivery(hd http.Header, scope *Scope, req *pipeline.Request) (func(*handlers, *gin.Context, tenancy.ID, *Scope, pipeline.Request), error) {
	async := pipeline.PrefersAsync(hd)
	if scope.Stream != nil {
		body, streaming, err := deliveryMode(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = body
		if streaming && !async {
			return (*handlers).runStream, nil
		}
	}
	if async {
		return (*handlers).runAsync, nil
	}
	return (*handlers).runPlain, nil
}

// runPlain answers with the operation's outcome: the stored answer, 409
// while another request runs it, or its failure.
func (h *handlers) runPlain(c *gin.Context, tenant tenancy.ID, scope *Scope, req pipeline.Request) {
	if res, ok := h.doPlain(c, tenant, scope, req); ok {
		h.answers.Result(c.Writer, req, res)
	}
}

// doPlain runs req's call for a plain answer, which the caller renders
// (false: an error was answered).
func (h *handlers) doPlain(c *gin.Context, tenant tenancy.ID, scope *Scope, req pipeline.Request) (idemguard.Result, bool) {
	res, err := h.guard.Do(c.Request.Context(), req.Call(tenant, h.route(tenant, scope, req.Body, false), req.Body), scope.operation(req.Body))
	if !h.called(c, scope.Name, req, res, err) {
		return res, false
	}
	// The operations of the REST API return no headers: the Location set
	// by called, the key's record, is the one a client follows.
	res.Header = nil
	return res, true
}

// route is the scope as the pipeline's call builder takes it, for inputs.
func (s *Scope) route(inputs json.RawMessage) pipeline.Route {
	return pipeline.Route{Scope: s.Name, Settings: s.Settings, Timeout: s.Timeout, Check: inputCheck(s, inputs)}
}

// route is scope's route for tenant: with the admission of the tenant's
// limits, for a background execution with job.
func (h *handlers) route(tenant tenancy.ID, scope *Scope, inputs json.RawMessage, job bool) pipeline.Route {
	rt := scope.route(inputs)
	if h.tenantLimits != nil {
		rt.Admit = h.tenantLimits.of(tenant, scope.Name).admission(job)
	}
	return rt
}

// operation is the scope's Run on inputs.
func (s *Scope) operation(inputs json.RawMessage) idemguard.Operation {
	run := s.Run
	return func(ctx context.Context) (any, error) { return run(ctx, inputs) }
}

// called is what every entry path of POST /v1/ops/:scope does with the
// guard's answer before delivering it: the key reference headers and the
// request log's fields. It answers an error itself and then reports false.
func (h *handlers) called(c *gin.Context, scope string, req pipeline.Request, res idemguard.Result, err error) bool {
	if err != nil {
		var ie *idemguard.InputError
		if req.ClientKey != "" && !errors.As(err, &ie) { // inputs refused before the claim name no key
			h.setRef(c.Writer.Header(), scope, req.ClientKey)
		}
		h.fail(c, err)
		return false
	}
	f := logOf(c) // once: each lookup takes the gin context's lock
	tenant, _ := tenantOf(c)
	h.setRef(c.Writer.Header(), scope, h.refOf(tenant, scope, f.principal, req.ClientKey, res.KeyHash))
	f.keyHash = shortHash(res.KeyHash)
	f.logOutcome(res)
	return true
}

// logOutcome puts res's stop reason and replay into the request log.
func logOutcome(c *gin.Context, res idemguard.Result) { logOf(c).logOutcome(res) }

func (f *logFields) logOutcome(res idemguard.Result) {
	f.stopReason = string(res.StopReason)
	if res.Cached {
		f.replayed = true
	}
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
	if !ok {
		return "", nil, false
	}
	if !scope.allows(tenant) {
		// As for a scope of no name: another tenant's scope is not there.
		h.fail(c, errUnknownScope)
		return "", nil, false
	}
	if _, err := h.tenantLimits.allow(tenant, scope.Name); err != nil {
		h.fail(c, err)
		return "", nil, false
	}
	return tenant, scope, true
}

// scope returns the scope named in the path, or answers 404.
func (h *handlers) scope(c *gin.Context) (*Scope, bool) {
	s, ok := h.scopes[c.Param("scope")]
	if !ok {
		// The unknown name is not echoed: it is the caller's text.
		h.fail(c, errUnknownScope)
		return nil, false
	}
	logOf(c).scope = s.Name
	return s, true
}

// errUnknownScope answers a scope that is not there, or not the caller's.
var errUnknownScope = pipeline.Reject(pipeline.ErrUnknownScope, "no operation is registered under this scope")

// shortHash is the prefix of a key hash that logs carry.
func shortHash(h string) string { return h[:min(12, len(h))] }

func tenantOf(c *gin.Context) (tenancy.ID, bool) {
	return tenancy.FromContext(c.Request.Context())
}

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
	// Progress is what the current attempt last reported (jobs.go).
	Progress *progressRecord `json:"progress,omitempty"`
	// Existing and EventsURL are set on a 202: whether the submission
	// joined a job already running, and where its events are (jobs.go).
	Existing  *bool  `json:"existing,omitempty"`
	EventsURL string `json:"eventsUrl,omitempty"`
}

// lookupKey serves GET /v1/ops/:scope/keys/:key. The key is a reference
// (pipeline.ParseRef): a client key, found under every configured secret,
// or "~" and a key hash. Another tenant's key is a 404, like an absent one.
func (h *handlers) lookupKey(c *gin.Context) {
	scope, ref, key, ok := h.keyRoute(c, false) // Lookup finds a client key under every secret
	if !ok {
		return
	}
	info, err := h.guard.Lookup(c.Request.Context(), key)
	if err != nil {
		h.fail(c, err)
		return
	}
	logOf(c).keyHash = shortHash(info.KeyHash)

	rec, err := keyRecordOf(ref, scope.Name, info)
	if err != nil {
		h.fail(c, err)
		return
	}
	c.Data(http.StatusOK, pipeline.ContentJSON, pipeline.EncodeJSON(rec))
}

func optTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return pipeline.FormatTime(t)
}
