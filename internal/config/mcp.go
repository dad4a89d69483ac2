package config

// The MCP door's settings: its path, and what each scope says of its tool.

import (
	"fmt"
	"strings"

	"github.com/idemguard/idemguard/tenancy"
)

// MCP configures the MCP door (docs/MCP.md): the Model Context Protocol
// over Streamable HTTP on the API's listener.
type MCP struct {
	// Path serves the door, e.g. /mcp; empty (the default): no door.
	Path string
}

// Enabled reports whether the door is served.
func (m MCP) Enabled() bool { return m.Path != "" }

type rawMCP struct {
	Path string `yaml:"path"`
}

// rawScopeAccess are a scope's settings of who may use it and how its MCP
// tool runs it (inlined in rawScope).
type rawScopeAccess struct {
	Tenants []string `yaml:"tenants"`
	Async   bool     `yaml:"async"`
}

// tenantIDs are the tenants the scope names.
func (s rawScopeAccess) tenantIDs() []tenancy.ID {
	var ids []tenancy.ID
	for _, t := range s.Tenants {
		ids = append(ids, tenancy.ID(strings.TrimSpace(t)))
	}
	return ids
}

// validateMCP checks the door's path and the scopes' tenants.
func (c *Config) validateMCP(p *problems) {
	if path := c.MCP.Path; path != "" && (!strings.HasPrefix(path, "/") || strings.HasSuffix(path, "/") ||
		strings.ContainsAny(path, ":*?# ") || strings.HasPrefix(path, "/v1/")) {
		p.add("mcp.path", "must start with / and not end with one, without : * ? # or spaces, outside /v1/, e.g. /mcp")
	}
	for i, s := range c.Scopes {
		for j, t := range s.Tenants {
			if !t.Valid() {
				p.add(fmt.Sprintf("scopes[%d].tenants[%d]", i, j), "is not a valid tenant id")
			}
		}
	}
}
