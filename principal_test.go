package idemguard

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Two principals of one tenant have key spaces of their own: the same
// inputs (no client key) run once per principal, never replaying the other's
// answer; the same client key is two keys; each looks up, cancels and reads
// the history of its own key only. Under one principal (or none) a duplicate
// is still a replay.
func TestPrincipalsHaveTheirOwnKeys(t *testing.T) {
	t.Parallel()
	g := newTestGuard(t, Config{Audit: AuditConfig{Store: true}})
	ctx := context.Background()
	var runs atomic.Int32
	op := func(who string) Operation {
		return func(context.Context) (any, error) {
			runs.Add(1)
			return map[string]any{"ok": true, "data": map[string]any{"for": who}}, nil
		}
	}
	call := func(principal, key string) Call {
		return Call{Tenant: "acme", Scope: "chat", Principal: principal, ClientKey: key, Inputs: map[string]any{"q": "same"}}
	}
	alice, err := g.Do(ctx, call("jwt:alice", ""), op("alice"))
	require.NoError(t, err)
	mallory, err := g.Do(ctx, call("jwt:mallory", ""), op("mallory"))
	require.NoError(t, err)
	require.False(t, mallory.Cached, "mallory must not get alice's answer")
	require.Contains(t, string(mallory.Body), "mallory")
	require.NotEqual(t, alice.KeyHash, mallory.KeyHash)
	again, err := g.Do(ctx, call("jwt:alice", ""), op("alice"))
	require.NoError(t, err)
	require.True(t, again.Cached)
	require.EqualValues(t, 2, runs.Load())

	_, err = g.Do(ctx, call("jwt:alice", "k1"), op("alice"))
	require.NoError(t, err)
	aliceKey, err := g.PrincipalKey("acme", "chat", "jwt:alice", "k1")
	require.NoError(t, err)
	malloryKey, err := g.PrincipalKey("acme", "chat", "jwt:mallory", "k1")
	require.NoError(t, err)
	_, err = g.Lookup(ctx, malloryKey)
	require.ErrorIs(t, err, ErrNotFound)
	_, err = g.Lookup(ctx, must(g.Key("acme", "chat", "k1")))
	require.ErrorIs(t, err, ErrNotFound, "the tenant's shared key space is another one too")
	info, err := g.Lookup(ctx, aliceKey)
	require.NoError(t, err)
	require.Equal(t, aliceKey.Hash(), info.KeyHash)
	require.True(t, errors.Is(g.Cancel(ctx, malloryKey), ErrNotFound))
	events, err := g.History(ctx, malloryKey)
	require.NoError(t, err)
	require.Empty(t, events)
	events, err = g.History(ctx, aliceKey)
	require.NoError(t, err)
	require.NotEmpty(t, events)

	_, err = g.PrincipalKey("acme", "chat", strings.Repeat("p", 1025), "k1")
	require.ErrorIs(t, err, ErrInvalidInput)
	_, err = g.Do(ctx, call("jwt:\x00", ""), op("x"))
	require.ErrorIs(t, err, ErrInvalidInput)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
