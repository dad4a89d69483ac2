package routers

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/tenancy"
)

// The limits cost a request no allocation once its tenant's entry exists:
// the rate and the admission of a replay (which never calls Admit).
func TestLimitsAllocateNothingPerRequest(t *testing.T) {
	l := newLimiter(Limits{})
	_, _ = l.allow("acme", "chat")
	allocs := testing.AllocsPerRun(1000, func() {
		e, err := l.allow("acme", "chat")
		if err != nil || e.admission(false) == nil {
			t.Error("refused")
		}
	})
	require.Zero(t, allocs)
}

// The calls of one key share its place, held by value: the place is given
// back with the last call, a job's with the job count, and a key that was
// given back takes a new one. A claim's admission allocates no place.
func TestPlacesAreSharedByAKeysCalls(t *testing.T) {
	c := &counts{lim: Limit{Concurrent: 2, Jobs: 1}}
	require.Empty(t, c.take("k", true, "run", "job"))
	require.Empty(t, c.take("k", true, "run", "job")) // a duplicate shares k's place
	require.Equal(t, "job", c.take("j", true, "run", "job"))
	require.Empty(t, c.take("r", false, "run", "job"))
	require.Equal(t, "run", c.take("s", false, "run", "job"))
	c.give("k")
	require.Equal(t, 2, c.running, "k still has a call")
	require.Equal(t, 1, c.jobs)
	c.give("k")
	require.Equal(t, 1, c.running)
	require.Zero(t, c.jobs)
	c.give("k") // nothing held: no effect
	require.Equal(t, 1, c.running)
	require.Empty(t, c.take("k", true, "run", "job"))
	c.give("k")
	c.give("r")
	require.Zero(t, c.running)
	require.Empty(t, c.keys)
	allocs := testing.AllocsPerRun(100, func() {
		c.take("k", false, "run", "job")
		c.give("k")
	})
	require.Zero(t, allocs)
}

// ctxSink makes a context escape, as a request's does.
var ctxSink context.Context

// An API key's caller is its tenant and auth.KeyActor of its name, made
// once per (tenant, name): later requests of the key allocate nothing for
// it, and put both in a request's context with one allocation.
func TestKeyActorsAreKeyActorMadeOnce(t *testing.T) {
	k := &keyActors{}
	for _, kc := range []keyCaller{{"acme", "billing"}, {"acme", ""}, {"acme", "ops"}, {"acme", "billing"}, {"beta", "ops"}, {"acme", "ops"}} {
		c := k.of(kc.tenant, kc.name)
		require.Equal(t, auth.KeyActor(kc.name), c.Actor(), kc)
		ctx := c.In(context.Background())
		tenant, ok := tenancy.FromContext(ctx)
		require.True(t, ok)
		require.Equal(t, kc.tenant, tenant)
		require.Equal(t, auth.KeyActor(kc.name), idemguard.ActorFrom(ctx))
	}
	require.EqualValues(t, 4, k.kept.Load())
	require.Same(t, k.of("acme", "billing"), k.of("acme", "billing"))
	require.NotSame(t, k.of("acme", "ops"), k.of("beta", "ops"))
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = k.of("acme", "billing") }))
	ctx := context.Background()
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() { ctxSink = k.of("acme", "billing").In(ctx) }))
	k.kept.Store(maxKeyActors) // full: a new name is made, not kept
	require.Equal(t, auth.KeyActor("new"), k.of("acme", "new").Actor())
	_, kept := k.m.Load(keyCaller{"acme", "new"})
	require.False(t, kept)
	require.Equal(t, auth.KeyActor("x"), (*keyActors)(nil).of("acme", "x").Actor())
}
