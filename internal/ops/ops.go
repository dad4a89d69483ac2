// Package ops is the registry of guarded operations: which scope runs which
// operation, with which protocol settings. The HTTP layer looks scopes up
// here; the operations themselves (OpenAI-compatible chat completion, generic
// JSON upstream, demo) live beside it.
package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/tenancy"
)

// Func runs one operation on the request's JSON inputs. Its value is
// sanitized by the guard before it is stored; return an *idemguard.OpError to
// say why it failed (rate_limited, timeout, ...).
type Func func(ctx context.Context, inputs json.RawMessage) (any, error)

// Scope is one registered operation with its settings.
type Scope struct {
	// Name is the scope, e.g. "chat" or "actionRequests.aiProposeCopy".
	Name string
	// Settings are the protocol settings (TTL, StaleAfter, MaxAttempts, StalePolicy).
	Settings idemguard.Settings
	// KeyRequired makes the Idempotency-Key header mandatory (400 without it);
	// otherwise the key is derived from the inputs.
	KeyRequired bool
	// Timeout bounds one execution (0: none).
	Timeout time.Duration
	// Run is the operation.
	Run Func
	// Validate, when set, checks the inputs before the guard claims the key:
	// an *idemguard.InputError is answered 400 naming the fields, and nothing
	// is stored or run. nil accepts any JSON.
	Validate func(inputs json.RawMessage) error
	// Stream, when set, runs the operation for a request whose body says
	// "stream": true (openai_stream.go); StreamReplay renders an answer
	// stored without events.
	Stream       StreamFunc
	StreamReplay func(sanitize.Envelope) []idemguard.Chunk
	// Isolation is whose key space the keys live in (config.Scope.Isolation).
	Isolation string
	// Tenants and Async are the scope's access settings (config.Scope);
	// InputSchema describes its inputs (nil: any object).
	Tenants     []tenancy.ID
	Async       bool
	InputSchema json.RawMessage
}

// Registry maps scope names to scopes. It is immutable once built and safe
// for concurrent use.
type Registry struct {
	scopes map[string]*Scope
}

// NewRegistry validates the scopes and returns a Registry.
func NewRegistry(scopes ...*Scope) (*Registry, error) {
	r := &Registry{scopes: make(map[string]*Scope, len(scopes))}
	for _, s := range scopes {
		if err := keys.ValidateScope(s.Name); err != nil {
			return nil, fmt.Errorf("ops: scope %q: %w", s.Name, err)
		}
		if err := s.Settings.Validate(); err != nil {
			return nil, fmt.Errorf("ops: scope %q: %w", s.Name, err)
		}
		if s.Run == nil {
			return nil, fmt.Errorf("ops: scope %q has no operation", s.Name)
		}
		if s.Timeout < 0 {
			return nil, fmt.Errorf("ops: scope %q: timeout must not be negative", s.Name)
		}
		if _, dup := r.scopes[s.Name]; dup {
			return nil, fmt.Errorf("ops: scope %q is registered twice", s.Name)
		}
		r.scopes[s.Name] = s
	}
	return r, nil
}

// Lookup returns the scope named name.
func (r *Registry) Lookup(name string) (*Scope, bool) {
	s, ok := r.scopes[name]
	return s, ok
}

// Names returns the registered scope names, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.scopes))
	for n := range r.scopes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
