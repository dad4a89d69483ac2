package routers

// The MCP door (routers/internal/mcpdoor owns its wire): each scope a
// caller may use is a tool. A tool call is one more delivery on the REST
// API's request pipeline: the same authentication per scope, tenant
// limits, inputs check, key derivation and guard call (Guard.Do, or
// Guard.Start for an async scope), and the same problems for what is
// refused.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/routers/internal/mcpdoor"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/tenancy"
)

// validateMCP checks MCPPath, and that every scope has a tool name of its
// own and a usable input schema.
func (o Options) validateMCP() error {
	if o.MCPPath == "" {
		return nil
	}
	if !validPath(o.MCPPath) {
		return fmt.Errorf("routers: Options.MCPPath %q must start with / and not end with one, without : * ? or #, e.g. /mcp", o.MCPPath)
	}
	names := map[string]string{mcpdoor.ToolJobStatus: "the job status tool", mcpdoor.ToolJobCancel: "the job cancel tool"}
	for i, s := range o.Scopes {
		tool := mcpdoor.ToolName(s.Name)
		if other, taken := names[tool]; taken {
			return fmt.Errorf("routers: Options.Scopes[%d] %q: its MCP tool %q is the name of %s; rename the scope", i, s.Name, tool, other)
		}
		names[tool] = fmt.Sprintf("scope %q", s.Name)
		if s.InputSchema != nil {
			var obj map[string]any
			if err := json.Unmarshal(s.InputSchema, &obj); err != nil {
				return fmt.Errorf("routers: Options.Scopes[%d] %q: InputSchema is not a JSON object: %w", i, s.Name, err)
			}
		}
	}
	return nil
}

// mcpRoutes serves the MCP door at Options.MCPPath on r.
func (h *handlers) mcpRoutes(r gin.IRouter, o Options) {
	creds := &auth.Credentials{APIKeys: o.Auth, JWT: o.JWT}
	scopes := make([]*Scope, 0, len(h.scopes))
	for _, s := range h.scopes {
		scopes = append(scopes, s)
	}
	slices.SortFunc(scopes, func(a, b *Scope) int { return cmp.Compare(a.Name, b.Name) })
	door := mcpdoor.New(mcpBackend{h}, mcpdoor.Options{Version: "v1", MaxBodyBytes: h.limits.MaxBody})
	serve := func(c *gin.Context) {
		caller, ok := h.mcpCaller(c, creds, o.ScopeAuth, scopes)
		if !ok {
			return
		}
		door.ServeHTTP(c.Writer, c.Request.WithContext(mcpdoor.WithCaller(c.Request.Context(), caller)))
	}
	for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
		r.Handle(m, o.MCPPath, serve)
	}
}

// mcpGrant is what a caller is in one scope: its key space and its actor.
type mcpGrant struct {
	scope            *Scope
	principal, actor string
}

// mcpGrants are a caller's scopes (mcpdoor.Caller.Grants), and its request
// log's fields, which its tool calls fill.
type mcpGrants struct {
	tenant tenancy.ID
	scopes map[string]mcpGrant
	mu     sync.Mutex
	log    *logFields
}

// mcpCaller authenticates an MCP request for every scope, as each scope's
// routes would: its tools are the scopes it passes and its tenant may use.
// A credential no scope accepts is answered 401 here.
func (h *handlers) mcpCaller(c *gin.Context, creds *auth.Credentials, byScope map[string][]auth.Method, scopes []*Scope) (*mcpdoor.Caller, bool) {
	if h.refuseBlocked(c) {
		return nil, false
	}
	g := &mcpGrants{scopes: make(map[string]mcpGrant), log: logOf(c)}
	caller := &mcpdoor.Caller{Grants: g}
	var refused error
	var method auth.Method
	for _, s := range scopes {
		p, err := creds.AuthenticateScope(c.Request.Context(), c.Request, s.Name, byScope[s.Name])
		if err == nil {
			var principal string
			if principal, err = h.principalOf(p, s.Name); err == nil {
				g.tenant, method = p.Tenant, p.Method
				if s.allows(p.Tenant) {
					g.scopes[s.Name] = mcpGrant{scope: s, principal: principal, actor: h.actorOf(p)}
					caller.Tools = append(caller.Tools, mcpdoor.Tool{Scope: s.Name, KeyRequired: s.KeyRequired, Async: s.Async,
						AllowForce: s.Settings.AllowReset, InputSchema: s.InputSchema})
				}
				continue
			}
		}
		refused = cmp.Or(refused, err)
	}
	if g.tenant == "" {
		h.authFailed(c, cmp.Or(refused, auth.ErrNoCredentials), true)
		return nil, false
	}
	g.log.tenant, g.log.auth = g.tenant, string(method)
	return caller, true
}

// mcpBackend runs the MCP door's calls (mcpdoor.Backend).
type mcpBackend struct{ h *handlers }

// grant is the caller's grant in scope, with one request taken from its
// tenant's rates; a scope it may not use is unknown.
func (b mcpBackend) grant(c *mcpdoor.Caller, scope string) (*mcpGrants, mcpGrant, error) {
	g := c.Grants.(*mcpGrants)
	gr, ok := g.scopes[scope]
	if !ok {
		return nil, mcpGrant{}, errUnknownScope
	}
	if _, err := b.h.tenantLimits.allow(g.tenant, scope); err != nil {
		b.h.tenantLimits.noteLimited(g.tenant, err)
		return nil, mcpGrant{}, err
	}
	g.note(scope, "", idemguard.Result{})
	return g, gr, nil
}

// note puts a tool call into the request's log line: its scope, and its
// key and outcome when known.
func (g *mcpGrants) note(scope, keyHash string, res idemguard.Result) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.log.scope = scope
	if keyHash != "" {
		g.log.keyHash, g.log.replayed = shortHash(keyHash), res.Cached
	}
	if res.StopReason != "" {
		g.log.stopReason = string(res.StopReason)
	}
}

// Call runs a scope's tool call: the REST API's POST /v1/ops/{scope}, with
// the key and inputs from the arguments. A duplicate of a running call
// waits for it up to Options.MaxWait (an async scope's answers at once).
func (b mcpBackend) Call(ctx context.Context, c *mcpdoor.Caller, call mcpdoor.Call) (mcpdoor.Answer, error) {
	h := b.h
	g, gr, err := b.grant(c, call.Scope)
	if err != nil {
		return mcpdoor.Answer{}, err
	}
	req := pipeline.Request{ClientKey: call.ClientKey, Raw: call.Inputs, Body: call.Inputs, Wait: h.limits.MaxWait, Principal: gr.principal,
		ForceNew: call.ForceNew}
	ctx = idemguard.WithActor(ctx, gr.actor)
	pc := req.Call(g.tenant, h.route(g.tenant, gr.scope, req.Body, call.Async), req.Body)
	var res idemguard.Result
	if call.Async {
		res, err = h.guard.Start(ctx, pc, gr.scope.operation(req.Body))
	} else {
		res, err = h.guard.Do(ctx, pc, gr.scope.operation(req.Body))
	}
	if err != nil {
		b.logUnexpected(err)
		g.note(call.Scope, "", idemguard.Result{StopReason: pipeline.ProblemFor(err).StopReason})
		return mcpdoor.Answer{}, err
	}
	g.note(call.Scope, res.KeyHash, res)
	ref := h.refOf(g.tenant, call.Scope, gr.principal, call.ClientKey, res.KeyHash)
	switch {
	case res.Status == idemguard.StatusInProgress && call.Async:
		return b.job(ctx, g.tenant, call.Scope, ref, res), nil
	case res.Status != idemguard.StatusSucceeded:
		p := mcpProblem(res)
		g.note(call.Scope, res.KeyHash, idemguard.Result{StopReason: p.StopReason, Cached: res.Cached})
		return mcpdoor.Answer{}, mcpdoor.Failed(p)
	}
	a := mcpdoor.Answer{Body: res.Body, Replayed: res.Cached, Ref: ref}
	if res.Forced {
		a.Replaced = res.Replaced
	}
	return a, nil
}

// job is the answer of an async tool call whose key runs: its key record,
// as POST /v1/ops/{scope} with Prefer: respond-async answers it.
func (b mcpBackend) job(ctx context.Context, tenant tenancy.ID, scope, ref string, res idemguard.Result) mcpdoor.Answer {
	rec := keyRecord{Ref: ref, Scope: scope, Status: string(store.RowStarted), AttemptCount: res.Attempt}
	if key, err := b.h.guard.KeyOfHash(tenant, scope, res.KeyHash); err == nil {
		rec = b.h.recordOf(ctx, key, rec)
	}
	return mcpdoor.Answer{Body: pipeline.EncodeJSON(rec), Replayed: !res.Accepted, Ref: ref}
}

// mcpProblem is the problem of a result that is not a success, worded for
// a tool call.
func mcpProblem(res idemguard.Result) pipeline.Problem {
	p := pipeline.ResultProblem(res)
	if res.Status == idemguard.StatusInProgress {
		p.Detail = "another call with this key is running the operation and did not finish within the wait; call again with the same " +
			mcpdoor.ArgKey + " to get its answer"
	}
	return p
}

// logUnexpected logs an error the REST API would answer 500, where the
// door answers it.
func (b mcpBackend) logUnexpected(err error) {
	if pipeline.ProblemFor(err).Status == http.StatusInternalServerError {
		b.h.log.Error("mcp: unexpected error", "err", err)
	}
}

// Job answers a job's key record: GET /v1/ops/{scope}/keys/{ref}, after
// following the running key for up to wait (capped by Options.MaxWait),
// telling progress (if set) of each progress event on the way.
func (b mcpBackend) Job(ctx context.Context, c *mcpdoor.Caller, scope, ref string, wait time.Duration,
	progress func(mcpdoor.Progress)) (json.RawMessage, error) {
	var follow func(context.Context, idemguard.Key) error
	if wait = min(wait, b.h.limits.MaxWait); wait > 0 {
		var onProgress func(store.Progress)
		if progress != nil {
			onProgress = func(p store.Progress) { progress(mcpdoor.Progress{Done: p.Done, Total: p.Total, Stage: p.Stage}) }
		}
		follow = func(ctx context.Context, key idemguard.Key) error {
			b.h.follow(ctx, key, wait, onProgress)
			return nil // the record answers, whether the job completed or not
		}
	}
	return b.keyAction(ctx, c, scope, ref, false, follow)
}

// Cancel cancels a job: POST /v1/ops/{scope}/keys/{ref}/cancel.
func (b mcpBackend) Cancel(ctx context.Context, c *mcpdoor.Caller, scope, ref string) (json.RawMessage, error) {
	return b.keyAction(ctx, c, scope, ref, true, b.h.guard.Cancel)
}

// keyAction resolves ref in the caller's key space of scope, runs act on
// its key (if set) and answers the key's record. Another tenant's key is
// not found, as on the key routes.
func (b mcpBackend) keyAction(ctx context.Context, c *mcpdoor.Caller, scope, ref string, rotated bool,
	act func(context.Context, idemguard.Key) error) (json.RawMessage, error) {
	g, gr, err := b.grant(c, scope)
	if err != nil {
		return nil, err
	}
	key, err := b.h.resolveRef(ctx, g.tenant, scope, gr.principal, ref, rotated)
	if err != nil {
		return nil, err
	}
	g.note(scope, key.Hash(), idemguard.Result{})
	if act != nil {
		if err := act(ctx, key); err != nil {
			b.logUnexpected(err)
			return nil, err
		}
	}
	info, err := b.h.guard.Lookup(ctx, key)
	if err != nil {
		b.logUnexpected(err)
		return nil, err
	}
	rec, err := keyRecordOf(ref, scope, info)
	if err != nil {
		return nil, err
	}
	return pipeline.EncodeJSON(rec), nil
}

var _ mcpdoor.Backend = mcpBackend{}
