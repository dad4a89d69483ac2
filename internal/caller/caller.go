// Package caller carries who asked, as an upstream may learn it, from the
// HTTP API's authentication to the operations that call upstreams: the
// tenant (tenancy.FromContext) and a pseudonymous actor.
//
// The actor is an HMAC of the caller's identity under the service secret
// ("h:" and 32 hex digits, idemguard.Guard.HashActor): the same caller
// gets the same actor while the secret stays, and the upstream learns
// neither a credential nor the JWT's subject. It is computed only when an
// operation asks for it (an execution), never on a replay.
package caller

import (
	"context"

	"github.com/idemguard/idemguard/tenancy"
)

// Upstream request headers: what an http_json upstream is told of the
// caller (docs/OPERATIONS.md, "What reaches the upstream").
const (
	// HeaderTenant carries the caller's tenant ID.
	HeaderTenant = "Idemguard-Tenant"
	// HeaderActor carries the caller's pseudonymous actor.
	HeaderActor = "Idemguard-Actor"
)

type key struct{}

type identity struct {
	principal string
	pseudonym func(string) string
}

// With returns ctx carrying the caller's identity: principal ("jwt:" and
// the token's subject, "key:" and the API key's name) and the function
// that turns it into a pseudonym. principal never leaves the process.
func With(ctx context.Context, principal string, pseudonym func(string) string) context.Context {
	if principal == "" || pseudonym == nil {
		return ctx
	}
	return context.WithValue(ctx, key{}, identity{principal, pseudonym})
}

// Actor returns the pseudonymous actor of the caller in ctx, or "" when
// ctx carries none.
func Actor(ctx context.Context) string {
	id, ok := ctx.Value(key{}).(identity)
	if !ok {
		return ""
	}
	return id.pseudonym(id.principal)
}

// Headers returns the upstream headers of the caller in ctx: the tenant
// and the actor, each only when known.
func Headers(ctx context.Context) map[string]string {
	h := map[string]string{}
	if t, ok := tenancy.FromContext(ctx); ok {
		h[HeaderTenant] = string(t)
	}
	if a := Actor(ctx); a != "" {
		h[HeaderActor] = a
	}
	return h
}
