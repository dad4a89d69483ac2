// Package ctxkeys holds the context keys of a request's caller: its tenant
// (tenancy.WithTenant, tenancy.FromContext) and its audit actor
// (idemguard.WithActor, idemguard.ActorFrom). Those packages name these
// types as their own keys, so that an entry path that authenticates every
// request can put both values in a context in one node ([Caller.In]),
// each boxed once per caller instead of per request.
package ctxkeys

import "context"

// Tenant is the key of a context's tenant, a tenancy.ID.
type Tenant struct{}

// Actor is the key of a context's audit actor, a string.
type Actor struct{}

// Caller is a caller's tenant and actor as a context's values under
// [Tenant] and [Actor]. It is immutable, so one Caller serves every
// request of its caller.
type Caller struct {
	tenant any // a tenancy.ID, boxed once
	actor  string
	boxed  any // actor, boxed once
}

// NewCaller returns the caller of tenant (a tenancy.ID: the value
// tenancy.FromContext asserts) and actor.
func NewCaller(tenant any, actor string) *Caller {
	return &Caller{tenant: tenant, actor: actor, boxed: actor}
}

// Actor is c's actor.
func (c *Caller) Actor() string { return c.actor }

// In returns parent carrying c's tenant and actor: what
// idemguard.WithActor(tenancy.WithTenant(parent, tenant), actor) returns,
// as one allocation.
func (c *Caller) In(parent context.Context) context.Context {
	return &callerCtx{Context: parent, c: c}
}

type callerCtx struct {
	context.Context
	c *Caller
}

func (x *callerCtx) Value(key any) any {
	switch key.(type) {
	case Tenant:
		return x.c.tenant
	case Actor:
		return x.c.boxed
	}
	return x.Context.Value(key)
}

// String names the node as context's own nodes do, for debugging.
func (x *callerCtx) String() string { return "ctxkeys.Caller.In" }
