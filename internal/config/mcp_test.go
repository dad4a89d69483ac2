package config

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/tenancy"
)

// TestLoadMCP: mcp.path turns the door on; a scope's tenants and async are
// read; a bad path or tenant is named by its setting.
func TestLoadMCP(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "mcp: {path: /mcp}\nscopes:\n  - {name: job, operation: demo, async: true, tenants: [acme, globex]}\n  - {name: chat, operation: demo}\n")
	c, err := Load(path, envOf(nil))
	require.NoError(t, err)
	require.Equal(t, MCP{Path: "/mcp"}, c.MCP)
	require.True(t, c.MCP.Enabled())
	require.True(t, c.Scopes[0].Async)
	require.Equal(t, []tenancy.ID{"acme", "globex"}, c.Scopes[0].Tenants)
	require.False(t, c.Scopes[1].Async)
	require.Empty(t, c.Scopes[1].Tenants)

	c, err = Load(writeFile(t, "listen: 127.0.0.1:0\n"), envOf(nil))
	require.NoError(t, err)
	require.False(t, c.MCP.Enabled(), "no door unless configured")

	_, err = Load(writeFile(t, "mcp: {path: mcp/}\nscopes:\n  - {name: job, operation: demo, tenants: ['bad tenant']}\n"), envOf(nil))
	require.ErrorContains(t, err, "mcp.path: must start with /")
	require.ErrorContains(t, err, "scopes[0].tenants[0]: is not a valid tenant id")
}
