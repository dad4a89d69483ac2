package routers

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/tenancy"
)

// Provider doors
//
// A Door serves a model provider's own wire, so that the provider's
// official SDK reaches the guard by changing its base URL. A door is a
// decoding of the request and a rendering of the answer and of its errors
// on the one request path of POST /v1/ops/{scope}: the same read
// (pipeline.Read), the same guard call and delivery (plain, or a stream
// with Last-Event-ID), the same stored, allowlisted answer. The request's
// model picks the scope (Door.Models, else Door.Scope) and is then taken
// out of the inputs, with the delivery members ("stream",
// "stream_options"): it is part of neither the key nor the fingerprint,
// and the upstream runs the scope's configured model. The answer echoes
// the request's model; the provider's model id is never stored.

// Wire is the protocol a Door speaks.
type Wire string

// The wires.
const (
	// WireOpenAI is OpenAI's chat completions: POST {Prefix}/chat/completions
	// answering chat.completion objects (chat.completion.chunk events when
	// streamed) and errors as {"error":{"message","type","param","code"}}.
	WireOpenAI Wire = "openai"
	// WireAnthropic is Anthropic's Messages API: POST {Prefix}/messages
	// answering message objects (the scope's Anthropic events when
	// streamed) and errors as {"type":"error","error":{"type","message"}};
	// the API key may come as x-api-key, as Anthropic's SDKs send it.
	WireAnthropic Wire = "anthropic"
)

// wireOf is how a wire reads and answers: its route after the prefix, its
// error rendering and its answer rendering (a stored chat answer as the
// wire's object, for the request's model).
type wireOf struct {
	path   string
	encode func(pipeline.Problem) (string, []byte)
	render func(res idemguard.Result, model string) []byte
}

var wires = map[Wire]wireOf{
	WireOpenAI:    {"/chat/completions", openAIError, chatCompletionOf},
	WireAnthropic: {"/messages", anthropicError, anthropicMessageOf},
}

// Door is a provider's wire served at Prefix (e.g. "/openai/v1": the base
// URL an SDK is given ends there), authenticated by the tenant's API key
// as the SDK's bearer key.
type Door struct {
	Wire   Wire
	Prefix string
	// Models maps a request's model to the scope that runs it; a model not
	// listed runs in Scope, or is refused (404) when Scope is empty.
	Models map[string]string
	Scope  string
	// KeyRequired refuses a request without an Idempotency-Key (400);
	// otherwise the key is derived from the body (a scope's KeyRequired
	// requires one too).
	KeyRequired bool
	// MaxWait is how long a duplicate of a running call waits for its
	// answer when it sends no Prefer: wait (an SDK's retry then ends with
	// the stored answer); capped by Options.MaxWait, which is the default.
	MaxWait time.Duration
}

// validate checks d against the scopes the API serves.
func (d Door) validate(scopes map[string]*Scope) error {
	switch {
	case wires[d.Wire].path == "":
		return fmt.Errorf("wire %q is not one of %q, %q", d.Wire, WireOpenAI, WireAnthropic)
	case !strings.HasPrefix(d.Prefix, "/") || strings.HasSuffix(d.Prefix, "/") || strings.ContainsAny(d.Prefix, ":*?#"):
		return fmt.Errorf("Prefix %q must start with / and not end with one, without : * ? or #, e.g. /openai/v1", d.Prefix)
	case d.MaxWait < 0:
		return errors.New("MaxWait must not be negative")
	}
	if d.Scope != "" {
		if err := doorScope(scopes, d.Scope); err != nil {
			return fmt.Errorf("Scope: %w", err)
		}
	}
	for model, s := range d.Models {
		if err := doorScope(scopes, s); err != nil {
			return fmt.Errorf("Models[%q]: %w", model, err)
		}
	}
	return nil
}

// doorScope checks that a door may run name: a scope of the API whose keys
// are the tenant's (a door authenticates API keys, whose callers share the
// tenant's key space unless the scope keeps keys per principal).
func doorScope(scopes map[string]*Scope, name string) error {
	s, ok := scopes[name]
	switch {
	case !ok:
		return fmt.Errorf("%q is not a scope of Options.Scopes", name)
	case s.Isolation == IsolationPrincipal:
		return fmt.Errorf("scope %q keeps keys per principal, which a door does not serve", name)
	}
	return nil
}

// validateDoors checks o.Doors: each valid, no two routes alike.
func (o Options) validateDoors() error {
	scopes := make(map[string]*Scope, len(o.Scopes))
	for i := range o.Scopes {
		scopes[o.Scopes[i].Name] = &o.Scopes[i]
	}
	seen := make(map[string]bool, len(o.Doors))
	for i, d := range o.Doors {
		if err := d.validate(scopes); err != nil {
			return fmt.Errorf("routers: Options.Doors[%d]: %w", i, err)
		}
		if seen[d.Prefix] {
			return fmt.Errorf("routers: Options.Doors[%d]: Prefix %q is listed twice", i, d.Prefix)
		}
		seen[d.Prefix] = true
	}
	return nil
}

// door serves one Door: h is the API's handlers with the door's error
// rendering, so every refusal on its route (authentication included)
// speaks the door's wire.
type door struct {
	Door
	wire wireOf
	h    *handlers
}

// doorRoutes adds each door's route to r.
func (h *handlers) doorRoutes(r gin.IRouter, o Options) {
	creds := &auth.Credentials{APIKeys: o.Auth}
	for _, d := range o.Doors {
		dd := &door{Door: d, wire: wires[d.Wire]}
		dh := *h
		dh.answers = h.answers.WithEncode(dd.wire.encode)
		dd.h = &dh
		dd.MaxWait = min(cmp.Or(d.MaxWait, h.limits.MaxWait), h.limits.MaxWait)
		chain := []gin.HandlerFunc{dh.authenticateScope(creds, nil), dd.serve}
		if d.Wire == WireAnthropic {
			chain = append([]gin.HandlerFunc{apiKeyHeader}, chain...)
		}
		r.POST(d.Prefix+dd.wire.path, chain...)
	}
}

// apiKeyHeader takes an x-api-key header (Anthropic's SDKs send the key
// there) as the bearer key, when the request has no Authorization.
func apiKeyHeader(c *gin.Context) {
	if k := c.Request.Header.Get("X-Api-Key"); k != "" && c.Request.Header.Get("Authorization") == "" {
		c.Request.Header.Set("Authorization", "Bearer "+k)
	}
}

// serve serves POST {Prefix}{wire's path}.
func (d *door) serve(c *gin.Context) {
	h := d.h
	tenant, ok := tenantOf(c)
	if !ok {
		h.fail(c, auth.ErrNoCredentials)
		return
	}
	req, err := pipeline.Read(c.Writer, c.Request, d.Prefix, d.KeyRequired, h.limits)
	if err != nil {
		h.fail(c, err)
		return
	}
	in, err := decodeDoorBody(req.Body)
	if err != nil {
		h.fail(c, err)
		return
	}
	scope, err := d.scopeOf(tenant, in.model, req.ClientKey)
	if err != nil {
		h.fail(c, err)
		return
	}
	logOf(c).scope = scope.Name
	// API keys only, on scopes of the tenant's key space (Door.validate).
	req.Body, req.Principal = in.inputs, ""
	if !pipeline.AsksWait(c.Request.Header) { // Prefer: wait=N (wait=0 too) is the client's word
		req.Wait = d.MaxWait
	}
	if in.stream {
		if scope.Stream == nil {
			h.fail(c, fieldError("/stream", "this model's scope does not stream"))
			return
		}
		h.runStream(c, tenant, scope, req)
		return
	}
	res, ok := h.doPlain(c, tenant, scope, req)
	if !ok {
		return
	}
	if res.Status == idemguard.StatusSucceeded {
		res.Body = d.wire.render(res, in.model)
	}
	h.answers.Result(c.Writer, req, res)
}

// scopeOf is the scope that runs model for tenant, checked as the REST
// API checks a scope (its tenants, its key requirement, the tenant's
// limits).
func (d *door) scopeOf(tenant tenancy.ID, model, clientKey string) (*Scope, error) {
	name, ok := d.Models[model]
	if !ok {
		name = d.Scope
	}
	scope, ok := d.h.scopes[name]
	switch {
	case !ok || !scope.allows(tenant):
		// The unknown name is not echoed: it is the caller's text. Another
		// tenant's scope (Scope.Tenants) is not there, as on the REST API.
		return nil, pipeline.Reject(pipeline.ErrUnknownModel, "no scope of this service runs the requested model")
	case scope.KeyRequired && clientKey == "":
		return nil, pipeline.Reject(pipeline.ErrMissingKey, "the model's scope %q requires an Idempotency-Key header", scope.Name)
	}
	if _, err := d.h.tenantLimits.allow(tenant, scope.Name); err != nil {
		return nil, err
	}
	return scope, nil
}

// doorBody is a door's request body, decoded.
type doorBody struct {
	model  string
	stream bool
	inputs json.RawMessage // the body without model and the delivery members
}

// doorMembers are taken out of a door's body before the scope sees it.
var doorMembers = [...]string{"model", "stream", "stream_options"}
