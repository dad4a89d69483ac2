// Package mcpdoor is the MCP door of the REST API: the Model Context
// Protocol over the Streamable HTTP transport (the official Go SDK), where
// every scope a caller may use is a tool guarded by its idempotency key.
//
// It is a delivery, not an engine: it turns a tool call into a Call and
// hands it to a Backend (package routers), which authenticates, limits and
// runs it on the one call path of every door (Guard.Do, Guard.Start) and
// answers with the stored answer. This package owns only the wire: the tool
// list, the arguments (the operation's inputs with an optional
// idempotencyKey), and the tool result (the stored answer as structured
// content, marked when it is a replay; a refusal or failure as a tool error
// whose structured content is the problem document the REST API answers).
//
// The transport is stateless: any replica answers any request, and the
// tools a request sees are those its credential may use, decided per
// request by the Backend (Caller, put in the request's context with
// WithCaller before the handler runs).
package mcpdoor

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Tool is one scope as a caller may use it.
type Tool struct {
	// Scope is the scope's name; the tool's name is ToolName(Scope).
	Scope string
	// KeyRequired makes idempotencyKey a required argument.
	KeyRequired bool
	// Async: the tool starts the operation in the background and answers
	// with the job's reference (the job tools read and cancel it).
	Async bool
	// AllowForce offers the forceNew argument: the scope allows forced
	// runs (idemguard.Settings.AllowReset).
	AllowForce bool
	// InputSchema is the JSON Schema of the operation's inputs (an object);
	// nil: any object.
	InputSchema json.RawMessage
}

// Caller is who an MCP request authenticated as, as the Backend found it.
type Caller struct {
	// Tools are the scopes the caller may use, in a fixed order (by name).
	Tools []Tool
	// Grants is the Backend's own record of the caller, handed back to it
	// with every call.
	Grants any
}

// Call is one tool call of a scope.
type Call struct {
	Scope string
	// ClientKey is the idempotencyKey argument ("": derive it from Inputs).
	ClientKey string
	// Inputs are the arguments without the door's own members: the
	// operation's inputs, keyed as the REST API keys a body.
	Inputs json.RawMessage
	Async  bool
	// ForceNew is the forceNew argument (idemguard.Call.ForceNew).
	ForceNew bool
}

// Answer is what a scope's tool answers.
type Answer struct {
	// Body is the stored answer (the envelope, as the REST API's body), or,
	// for a job that runs, its key record.
	Body json.RawMessage
	// Replayed: the answer is not this call's own execution.
	Replayed bool
	// Ref is the key's reference, for the job tools and lookups.
	Ref string
	// Replaced is the attempt whose answer a forced run replaced (0: none).
	Replaced int
}

// Progress is how far a running job got, as a progress event reported it:
// numbers, and a stage from its scope's allowlist ("" for none).
type Progress struct {
	Done, Total int64
	Stage       string
}

// Backend runs what the door is asked: package routers, on its one request
// pipeline. Its errors are those the REST API answers (pipeline.ProblemFor
// maps them).
type Backend interface {
	Call(ctx context.Context, c *Caller, call Call) (Answer, error)
	// Job and Cancel answer a job's key record; ref is the reference the
	// job's tool call answered. Job follows a running job for up to wait
	// (bounded by the Backend) and answers once it completed or the wait
	// ended; progress, if set, is told each progress of the job while it
	// follows (the door sends it as an MCP progress notification).
	Job(ctx context.Context, c *Caller, scope, ref string, wait time.Duration, progress func(Progress)) (json.RawMessage, error)
	Cancel(ctx context.Context, c *Caller, scope, ref string) (json.RawMessage, error)
}

type callerKey struct{}

// WithCaller returns ctx carrying c, for the handler New returns.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// Options configure the door.
type Options struct {
	// Version is the server's version in the initialize answer.
	Version string
	// MaxBodyBytes bounds a request's body (the JSON-RPC message).
	MaxBodyBytes int64
}

// New returns the door's handler. Every request must carry a Caller
// (WithCaller); one without is refused (401) by the SDK's bearer check.
func New(b Backend, o Options) http.Handler {
	d := &door{backend: b, version: o.Version, servers: newServerCache()}
	h := mcp.NewStreamableHTTPHandler(d.server, &mcp.StreamableHTTPOptions{
		Stateless: true, // any replica answers: nothing of a session lives in a process
		// Answers are server-sent events, so that the progress notifications
		// of a call that follows a job reach the client before its result.
		JSONResponse:        false,
		MaxRequestBodyBytes: o.MaxBodyBytes,
		// The SDK refuses a request that reached a loopback address with
		// another Host (a local server's defence against DNS rebinding):
		// that is every request a reverse proxy on the same host forwards.
		// The door needs a bearer credential in a header, which a page
		// rebound to this address cannot send, as the REST API does.
		DisableLocalhostProtection: true,
	})
	verify := func(ctx context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		c, ok := r.Context().Value(callerKey{}).(*Caller)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Extra: map[string]any{extraCaller: c}}, nil
	}
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
}

// extraCaller is the TokenInfo.Extra member holding the *Caller: the SDK
// hands the TokenInfo to each tool call of the request.
const extraCaller = "idemguard.caller"

// callerOf is the Caller of a tool call's request.
func callerOf(req *mcp.CallToolRequest) (*Caller, bool) {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return nil, false
	}
	c, ok := req.Extra.TokenInfo.Extra[extraCaller].(*Caller)
	return c, ok
}

// door builds the MCP server of each request from its caller's tools.
type door struct {
	backend Backend
	version string
	servers *serverCache
}

// server is the MCP server of r's caller: its tools, built once per set of
// tools and kept (a server holds no caller: each call reads its own).
func (d *door) server(r *http.Request) *mcp.Server {
	c, _ := r.Context().Value(callerKey{}).(*Caller)
	var tools []Tool
	if c != nil {
		tools = c.Tools
	}
	return d.servers.get(tools, d.newServer)
}
