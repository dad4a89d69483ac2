package config

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The wires a door may speak.
const (
	WireOpenAI    = "openai"
	WireAnthropic = "anthropic"
)

// Door serves a model provider's wire, so that the provider's SDK reaches
// the scopes by changing its base URL (docs/CONFIGURATION.md, "doors").
type Door struct {
	// Wire is the protocol: WireOpenAI or WireAnthropic.
	Wire string
	// Prefix is the base URL's path, e.g. /openai/v1.
	Prefix string
	// Models maps a request's model to the scope that runs it; others run
	// in Scope, or are refused when it is empty.
	Models map[string]string
	Scope  string
	// KeyRequired refuses requests without an Idempotency-Key.
	KeyRequired bool
	// MaxWait is how long a duplicate of a running call waits for its
	// answer (0: max_wait).
	MaxWait time.Duration
}

type rawDoor struct {
	Wire        string            `yaml:"wire"`
	Prefix      string            `yaml:"prefix"`
	Models      map[string]string `yaml:"models"`
	Scope       string            `yaml:"scope"`
	KeyRequired bool              `yaml:"key_required"`
	MaxWait     string            `yaml:"max_wait"`
}

// doorsFromRaw reads the doors; validateDoors checks them.
func (c *Config) doorsFromRaw(raw []rawDoor, p *problems) {
	for i, d := range raw {
		door := Door{Wire: d.Wire, Prefix: d.Prefix, Models: d.Models, Scope: d.Scope, KeyRequired: d.KeyRequired}
		door.MaxWait = p.duration(fmt.Sprintf("doors[%d].max_wait", i), d.MaxWait, 0)
		c.Doors = append(c.Doors, door)
	}
}

// doorOperations are the operations whose answers each wire renders.
var doorOperations = map[string][]Operation{
	WireOpenAI:    {OpOpenAIChat, OpDemo},
	WireAnthropic: {OpAnthropicMessages},
}

// validateDoors checks each door's wire, prefix and scopes.
func (c *Config) validateDoors(p *problems) {
	ops := make(map[string]Operation, len(c.Scopes))
	for _, s := range c.Scopes {
		ops[s.Name] = s.Operation
	}
	checkScope := func(wire, setting, name string) {
		op, ok := ops[name]
		switch {
		case !ok:
			p.add(setting, "%q is not a configured scope", name)
		case !slices.Contains(doorOperations[wire], op):
			p.add(setting, "scope %q runs %s; a door of wire %s runs %v scopes", name, op, wire, doorOperations[wire])
		}
	}
	seen := map[string]bool{}
	for i, d := range c.Doors {
		at := fmt.Sprintf("doors[%d]", i)
		if doorOperations[d.Wire] == nil {
			p.add(at+".wire", "want %s or %s, got %q", WireOpenAI, WireAnthropic, d.Wire)
		}
		if !strings.HasPrefix(d.Prefix, "/") || strings.HasSuffix(d.Prefix, "/") || strings.ContainsAny(d.Prefix, ":*?#") || seen[d.Prefix] {
			p.add(at+".prefix", "want a path of its own that starts with / and does not end with one, e.g. /openai/v1, got %q", d.Prefix)
		}
		seen[d.Prefix] = true
		if d.Scope != "" {
			checkScope(d.Wire, at+".scope", d.Scope)
		}
		for model, s := range d.Models {
			checkScope(d.Wire, fmt.Sprintf("%s.models[%q]", at, model), s)
		}
		if d.Scope == "" && len(d.Models) == 0 {
			p.add(at, "name a scope, or models mapped to scopes")
		}
		if d.MaxWait < 0 {
			p.add(at+".max_wait", "must not be negative")
		}
	}
}
