package routers

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/routers/auth"
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

// An API key's audit actor is auth.KeyActor of its name, made once per
// name: later requests of the key allocate nothing for it.
func TestKeyActorsAreKeyActorMadeOnce(t *testing.T) {
	k := &keyActors{}
	for _, name := range []string{"billing", "", "ops", "billing", "ops"} {
		require.Equal(t, auth.KeyActor(name), k.of(name), name)
	}
	require.EqualValues(t, 3, k.kept.Load())
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = k.of("billing") }))
	k.kept.Store(maxKeyActors) // full: a new name is made, not kept
	require.Equal(t, auth.KeyActor("new"), k.of("new"))
	_, kept := k.m.Load("new")
	require.False(t, kept)
	require.Equal(t, auth.KeyActor("x"), (*keyActors)(nil).of("x"))
}
