package mcpdoor

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

// The door's own tools, offered to a caller with an async scope.
const (
	ToolJobStatus = "idemguard_job_status"
	ToolJobCancel = "idemguard_job_cancel"
)

// maxWaitSeconds bounds a job status's wait before the Backend's own cap.
const maxWaitSeconds = 3600

// The door's own arguments: the idempotency key, and (where the scope
// allows it) the request for a forced run.
const (
	ArgKey      = "idempotencyKey"
	ArgForceNew = "forceNew"
)

// ToolName is the tool of scope: its name, with ":" (which tool names may
// not hold) as "_".
func ToolName(scope string) string { return strings.ReplaceAll(scope, ":", "_") }

// MetaReplayed and MetaRef mark a tool result (its _meta): a replay of a
// stored answer, and the key's reference.
const (
	MetaReplayed = "idemguard/replayed"
	MetaRef      = "idemguard/ref"
	// MetaReplaces is the attempt a forced run's answer replaced.
	MetaReplaces = "idemguard/replacesAttempt"
)

// maxServers bounds the servers kept, one per set of tools seen.
const maxServers = 256

// serverCache keeps the server of each set of tools.
type serverCache struct {
	mu sync.Mutex
	m  map[string]*mcp.Server
}

func newServerCache() *serverCache { return &serverCache{m: make(map[string]*mcp.Server)} }

// get returns the server of tools, building it with build once.
func (sc *serverCache) get(tools []Tool, build func([]Tool) *mcp.Server) *mcp.Server {
	var b strings.Builder
	for _, t := range tools {
		b.WriteString(t.Scope)
		b.WriteByte(0)
	}
	k := b.String()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if s, ok := sc.m[k]; ok {
		return s
	}
	s := build(tools)
	if len(sc.m) < maxServers {
		sc.m[k] = s
	}
	return s
}

// newServer is the server of a caller who may use tools.
func (d *door) newServer(tools []Tool) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "idemguard", Version: d.version}, nil)
	async := false
	for _, t := range tools {
		s.AddTool(&mcp.Tool{Name: ToolName(t.Scope), Description: describe(t), InputSchema: inputSchema(t)}, d.callScope(t))
		async = async || t.Async
	}
	if async {
		s.AddTool(&mcp.Tool{Name: ToolJobStatus, Description: "The status of a job an async tool started: its key record, with the stored answer " +
			"once it completed. With wait, follows the running job for up to that many seconds first.",
			InputSchema: jobStatusSchema}, d.jobTool(d.backend.Job))
		s.AddTool(&mcp.Tool{Name: ToolJobCancel, Description: "Cancel a job an async tool started; it stops within one heartbeat and the same call runs it again.",
			InputSchema: jobSchema}, d.jobTool(func(ctx context.Context, c *Caller, scope, ref string, _ time.Duration, _ func(Progress)) (json.RawMessage, error) {
			return d.backend.Cancel(ctx, c, scope, ref)
		}))
	}
	return s
}

func describe(t Tool) string {
	d := "Runs the operation of scope " + t.Scope + " at most once per idempotency key: a retry with the same " +
		ArgKey + " (or, without one, the same arguments) gets the stored answer, marked replayed, and never runs it again."
	if t.Async {
		d += " It starts a job and answers at once with its reference; read it with " + ToolJobStatus + "."
	}
	if t.AllowForce {
		d += " With " + ArgForceNew + " true it runs a finished key again and answers the new result."
	}
	return d
}

// The inputs of the job tools.
var (
	jobArgs = `"scope":{"type":"string","description":"the scope of the job's tool"},` +
		`"ref":{"type":"string","description":"the job's reference, as its tool answered it"}`
	jobSchema       = json.RawMessage(`{"type":"object","properties":{` + jobArgs + `},"required":["scope","ref"],"additionalProperties":false}`)
	jobStatusSchema = json.RawMessage(`{"type":"object","properties":{` + jobArgs +
		`,"wait":{"type":"integer","minimum":0,"description":"seconds to follow a running job before answering (capped by the server)"}},` +
		`"required":["scope","ref"],"additionalProperties":false}`)
)

// inputSchema is t's operation's input schema with the idempotencyKey
// argument added.
func inputSchema(t Tool) json.RawMessage {
	schema := map[string]any{}
	if t.InputSchema != nil {
		_ = json.Unmarshal(t.InputSchema, &schema) // checked where the scope is configured
	}
	schema["type"] = "object"
	props, _ := schema["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	props[ArgKey] = map[string]any{"type": "string", "minLength": 1, "maxLength": keys.MaxClientKeyLen, "pattern": "^[A-Za-z0-9_.:-]+$",
		"description": "Names this call: a retry with the same key never runs the operation twice. Without it the key is derived from the other arguments."}
	if t.AllowForce {
		props[ArgForceNew] = map[string]any{"type": "boolean",
			"description": "Run the key again even if it has a stored answer, replacing it. Send it once: a retry of a forced call sends false."}
	}
	schema["properties"] = props
	if t.KeyRequired {
		req, _ := schema["required"].([]any)
		schema["required"] = append(req, ArgKey)
	}
	b, _ := json.Marshal(schema)
	return b
}

// callScope is the handler of t's tool.
func (d *door) callScope(t Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c, ok := callerOf(req)
		if !ok {
			return failed(errNoCaller), nil
		}
		call, err := readCall(t, req.Params.Arguments)
		if err != nil {
			return failed(err), nil
		}
		a, err := d.backend.Call(ctx, c, call)
		if err != nil {
			return failed(err), nil
		}
		return answered(a), nil
	}
}

var errNoCaller = pipeline.Reject(pipeline.ErrUnknownScope, "no operation is registered under this scope")

// readCall reads a tool call's arguments: the idempotencyKey, and the rest
// as the operation's inputs.
func readCall(t Tool, args json.RawMessage) (Call, error) {
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	own := []string{ArgKey}
	if t.AllowForce { // elsewhere a forceNew member is the operation's own input
		own = append(own, ArgForceNew)
	}
	inputs, taken, ok, err := pipeline.TakeMembers(args, own...)
	switch {
	case err != nil:
		return Call{}, err
	case !ok:
		return Call{}, pipeline.Reject(pipeline.ErrInvalidBody, "the arguments must be a JSON object with unique member names")
	}
	call := Call{Scope: t.Scope, Inputs: inputs, Async: t.Async}
	if v, has := taken[ArgKey]; has {
		s, isString := v.(string)
		if !isString {
			return Call{}, pipeline.Reject(pipeline.ErrInvalidKey, "%s must be a string", ArgKey)
		}
		if call.ClientKey, err = pipeline.ClientKey(s); err != nil {
			return Call{}, err
		}
	}
	if v, has := taken[ArgForceNew]; has {
		if call.ForceNew, ok = v.(bool); !ok {
			return Call{}, pipeline.Reject(pipeline.ErrInvalidBody, "%s must be true or false", ArgForceNew)
		}
	}
	if call.ClientKey == "" && t.KeyRequired {
		return Call{}, pipeline.Reject(pipeline.ErrMissingKey, "scope %q requires an %s argument", t.Scope, ArgKey)
	}
	return call, nil
}

// jobRun answers a job tool's call (Backend.Job's arguments).
type jobRun func(ctx context.Context, c *Caller, scope, ref string, wait time.Duration, progress func(Progress)) (json.RawMessage, error)

// jobTool is the handler of a job tool that answers with run.
func (d *door) jobTool(run jobRun) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c, ok := callerOf(req)
		if !ok {
			return failed(errNoCaller), nil
		}
		var args struct {
			Scope, Ref string
			Wait       int64
		}
		if err := json.Unmarshal(req.Params.Arguments, &args); err != nil || args.Scope == "" || args.Ref == "" || args.Wait < 0 {
			return failed(pipeline.Reject(pipeline.ErrInvalidRef, "the arguments are a scope and a job's ref, both strings, and an optional wait in whole seconds")), nil
		}
		rec, err := run(ctx, c, args.Scope, args.Ref, time.Duration(min(args.Wait, maxWaitSeconds))*time.Second, notifier(ctx, req))
		if err != nil {
			return failed(err), nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(rec)}}, StructuredContent: rec}, nil
	}
}

// notifier sends each progress as an MCP progress notification of req,
// when its caller asked for them (a progressToken in its _meta): the
// numbers, and the stage (on its scope's allowlist) as the message.
func notifier(ctx context.Context, req *mcp.CallToolRequest) func(Progress) {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return nil
	}
	return func(p Progress) {
		// A notification that cannot be sent (the client left) is not
		// the call's failure: the answer says how it ended.
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token,
			Progress: float64(p.Done), Total: float64(p.Total), Message: p.Stage})
	}
}

// answered is the tool result of an answer: the stored answer as structured
// content (and as text, for clients that read only text), marked.
func answered(a Answer) *mcp.CallToolResult {
	meta := mcp.Meta{MetaReplayed: a.Replayed, MetaRef: a.Ref}
	if a.Replaced > 0 {
		meta[MetaReplaces] = a.Replaced
	}
	return &mcp.CallToolResult{
		Meta:              meta,
		Content:           []mcp.Content{&mcp.TextContent{Text: string(a.Body)}},
		StructuredContent: a.Body,
	}
}

// failed is the tool error of err: the problem document the REST API would
// answer, as structured content, and its title and detail as text.
func failed(err error) *mcp.CallToolResult {
	p := pipeline.ProblemFor(err)
	var fe *failure
	if errors.As(err, &fe) {
		p = fe.p
	}
	text := p.Title
	if p.Detail != "" {
		text += ": " + p.Detail
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: p}
}

// failure is an answer of the guard that is not a success (a stored
// failure, a call in progress), as the Backend reports it.
type failure struct{ p pipeline.Problem }

func (f *failure) Error() string { return f.p.Title }

// Failed is the error a Backend returns for a result that is a problem.
func Failed(p pipeline.Problem) error { return &failure{p: p} }
