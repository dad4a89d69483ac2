package mcpdoor

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

// TestReadCall: the door's own arguments are taken out of the inputs (and
// forceNew only where the scope allows forced runs); what is not an object
// of unique members, a key that is not a valid key, a missing required key
// and a forceNew that is not a boolean are refused before the guard.
func TestReadCall(t *testing.T) {
	t.Parallel()
	plain, strict, force := Tool{Scope: "s"}, Tool{Scope: "s", KeyRequired: true}, Tool{Scope: "s", AllowForce: true}
	for _, c := range []struct {
		name     string
		tool     Tool
		args     string
		key      string
		inputs   string
		forceNew bool
		err      error
	}{
		{name: "empty", tool: plain, args: ``, inputs: `{}`},
		{name: "null", tool: plain, args: `null`, inputs: `{}`},
		{name: "no key", tool: plain, args: `{"n":1}`, inputs: `{"n":1}`},
		{name: "key taken out", tool: plain, args: `{"n":1,"idempotencyKey":"k-1"}`, key: "k-1", inputs: `{"n":1}`},
		{name: "forceNew is an input", tool: plain, args: `{"n":1,"forceNew":true}`, inputs: `{"n":1,"forceNew":true}`},
		{name: "forceNew taken out", tool: force, args: `{"n":1,"forceNew":true,"idempotencyKey":"k"}`, key: "k", inputs: `{"n":1}`, forceNew: true},
		{name: "not an object", tool: plain, args: `[1]`, err: pipeline.ErrInvalidBody},
		{name: "repeated member", tool: plain, args: `{"n":1,"n":2}`, err: pipeline.ErrInvalidBody},
		{name: "key not a string", tool: plain, args: `{"idempotencyKey":7}`, err: pipeline.ErrInvalidKey},
		{name: "bad key", tool: plain, args: `{"idempotencyKey":"a b"}`, err: pipeline.ErrInvalidKey},
		{name: "required key missing", tool: strict, args: `{"n":1}`, err: pipeline.ErrMissingKey},
		{name: "forceNew not a boolean", tool: force, args: `{"forceNew":"yes"}`, err: pipeline.ErrInvalidBody},
	} {
		call, err := readCall(c.tool, json.RawMessage(c.args))
		if c.err != nil {
			require.True(t, errors.Is(err, c.err), "%s: %v", c.name, err)
			continue
		}
		require.NoError(t, err, c.name)
		require.Equal(t, c.key, call.ClientKey, c.name)
		require.JSONEq(t, c.inputs, string(call.Inputs), c.name)
		require.Equal(t, c.forceNew, call.ForceNew, c.name)
	}
}

// TestInputSchema: the operation's schema with the door's arguments added,
// idempotencyKey required where the scope requires a key.
func TestInputSchema(t *testing.T) {
	t.Parallel()
	var s struct {
		Type       string
		Properties map[string]any
		Required   []string
	}
	require.NoError(t, json.Unmarshal(inputSchema(Tool{Scope: "s"}), &s))
	require.Equal(t, "object", s.Type)
	require.Contains(t, s.Properties, ArgKey)
	require.NotContains(t, s.Properties, ArgForceNew)
	require.Empty(t, s.Required)

	op := json.RawMessage(`{"type":"object","properties":{"messages":{"type":"array"}},"required":["messages"]}`)
	s.Properties, s.Required = nil, nil
	require.NoError(t, json.Unmarshal(inputSchema(Tool{Scope: "s", KeyRequired: true, AllowForce: true, InputSchema: op}), &s))
	require.Contains(t, s.Properties, "messages")
	require.Contains(t, s.Properties, ArgForceNew)
	require.Equal(t, []string{"messages", ArgKey}, s.Required)
	require.Equal(t, "a_b", ToolName("a:b"))
}
