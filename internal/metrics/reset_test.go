package metrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/store/memstore"
)

// A reset and a forced run of a real Guard are counted by scope and kind.
func TestResetsAreCountedByScope(t *testing.T) {
	m := metrics.New()
	m.InitScopes("chat")
	g, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: []byte("0123456789abcdef0123456789abcdef"), Observe: m.Observe})
	require.NoError(t, err)
	defer func() { _ = g.Close(context.Background()) }()
	ctx := context.Background()
	op := func(context.Context) (any, error) { return map[string]any{"ok": true}, nil }
	c := idemguard.Call{Tenant: "t", Scope: "chat", ClientKey: "k", Inputs: 1, Settings: idemguard.Settings{AllowReset: true}}
	first, err := g.Do(ctx, c, op)
	require.NoError(t, err)
	// A forced call replaces only an answer stored before it began.
	for time.Since(first.CompletedAt) <= time.Millisecond {
		time.Sleep(100 * time.Microsecond)
	}
	forced := c
	forced.ForceNew = true
	_, err = g.Do(ctx, forced, op)
	require.NoError(t, err)
	key, err := g.Key("t", "chat", "k")
	require.NoError(t, err)
	_, err = g.Reset(ctx, key, c.Settings)
	require.NoError(t, err)
	require.Equal(t, 1.0, value(t, m.Registry(), "idemguard_resets_total", map[string]string{"scope": "chat", "kind": "reset"}))
	require.Equal(t, 1.0, value(t, m.Registry(), "idemguard_resets_total", map[string]string{"scope": "chat", "kind": "forced"}))
}
