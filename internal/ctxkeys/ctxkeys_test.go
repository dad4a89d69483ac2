package ctxkeys_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/ctxkeys"
	"github.com/idemguard/idemguard/tenancy"
)

type otherKey struct{}

// A Caller's node is what tenancy.WithTenant and idemguard.WithActor
// together make: both read back through their packages' own readers, any
// other value and the cancellation are the parent's, and a later
// WithTenant or WithActor overrides it as it would the other's.
func TestCallerInIsWithTenantAndWithActor(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), otherKey{}, "v"))
	c := ctxkeys.NewCaller(tenancy.ID("acme"), "key:billing")
	require.Equal(t, "key:billing", c.Actor())
	ctx := c.In(parent)
	want := idemguard.WithActor(tenancy.WithTenant(parent, "acme"), "key:billing")
	for _, got := range []context.Context{ctx, want} {
		id, ok := tenancy.FromContext(got)
		require.True(t, ok)
		require.Equal(t, tenancy.ID("acme"), id)
		require.Equal(t, "key:billing", idemguard.ActorFrom(got))
		require.Equal(t, "v", got.Value(otherKey{}))
	}
	over := idemguard.WithActor(tenancy.WithTenant(ctx, "beta"), "jwt")
	id, _ := tenancy.FromContext(over)
	require.Equal(t, tenancy.ID("beta"), id)
	require.Equal(t, "jwt", idemguard.ActorFrom(over))
	// A node under it is seen through it: the parent's, shadowed.
	under := c.In(idemguard.WithActor(tenancy.WithTenant(parent, "beta"), "jwt"))
	id, _ = tenancy.FromContext(under)
	require.Equal(t, tenancy.ID("acme"), id)
	require.Equal(t, "key:billing", idemguard.ActorFrom(under))

	child, stop := context.WithTimeout(ctx, time.Hour)
	defer stop()
	cancel(context.Canceled)
	<-child.Done()
	require.ErrorIs(t, context.Cause(ctx), context.Canceled)
	require.ErrorIs(t, child.Err(), context.Canceled)
}

// An unvalidated tenant is refused by tenancy.FromContext, as from
// WithTenant.
func TestCallerTenantIsValidatedOnRead(t *testing.T) {
	_, ok := tenancy.FromContext(ctxkeys.NewCaller(tenancy.ID("no spaces"), "a").In(context.Background()))
	require.False(t, ok)
}

// sink makes the contexts escape, as a request's does.
var sink context.Context

// The point of a Caller: one allocation per request, whatever it carries.
func TestCallerInAllocatesOnce(t *testing.T) {
	c := ctxkeys.NewCaller(tenancy.ID("acme"), "key:billing")
	ctx := context.Background()
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() { sink = c.In(ctx) }))
}
