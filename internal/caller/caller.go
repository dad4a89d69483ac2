// Package caller says who asked, as an upstream may learn it: the tenant (tenancy.FromContext)
// and a pseudonymous actor.
//
// The actor is an HMAC, under the service secret, of the caller the audit trail names
// (idemguard.ActorFrom: "key:<name>" for an API key, "jwt:h:<hex>" for a JWT's subject, itself
// already an HMAC): "h:" and 32 hex digits (idemguard.Guard.HashActor). The same caller gets the
// same actor while the secret stays, and an upstream learns neither a credential, nor a subject,
// nor a key's name. It is computed only when an operation asks for it (an execution, never a
// replay), from what the request's context already carries: naming the caller costs a request
// nothing.
package caller

import (
	"context"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/tenancy"
)

// Upstream request headers: what an http_json upstream is told of the caller
// (docs/OPERATIONS.md, "What reaches the upstream").
const (
	// HeaderTenant carries the caller's tenant ID.
	HeaderTenant = "Idemguard-Tenant"
	// HeaderActor carries the caller's pseudonymous actor.
	HeaderActor = "Idemguard-Actor"
)

// Pseudonym turns the audit trail's actor into the one an upstream is told
// (idemguard.Guard.HashActor).
type Pseudonym func(actor string) string

// Actor returns the pseudonymous actor of the caller in ctx, or "" when ctx names no caller or
// pseudonym is nil.
func Actor(ctx context.Context, pseudonym Pseudonym) string {
	a := idemguard.ActorFrom(ctx)
	if a == "" || pseudonym == nil {
		return ""
	}
	return pseudonym(a)
}

// Headers returns the upstream headers of the caller in ctx: the tenant and the actor, each only
// when known.
func Headers(ctx context.Context, pseudonym Pseudonym) map[string]string {
	h := map[string]string{}
	if t, ok := tenancy.FromContext(ctx); ok {
		h[HeaderTenant] = string(t)
	}
	if a := Actor(ctx, pseudonym); a != "" {
		h[HeaderActor] = a
	}
	return h
}
