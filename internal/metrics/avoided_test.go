package metrics_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/metrics"
)

func TestAvoidedCallSeriesStartAtZero(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.InitScopes("chat")
	text := strings.Join(scrape(t, m), "\n") + "\n"
	for _, want := range []string{
		`idemguard_avoided_calls_total{scope="chat"} 0`,
		`idemguard_avoided_tokens_total{kind="prompt",scope="chat"} 0`,
		`idemguard_avoided_tokens_total{kind="completion",scope="chat"} 0`,
		`idemguard_avoided_cost_total{scope="chat"} 0`,
	} {
		require.Contains(t, text, want+"\n")
	}
}

func TestAvoidedCallAddsUp(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	m.InitScopes("chat")
	// Three replays of an answer that used 120 prompt and 30 completion tokens at 0.0015.
	for range 3 {
		m.AvoidedCall("chat", 120, 30, 0.0015)
	}
	// A scope without prices, and figures that would make a counter go down.
	m.AvoidedCall("chat", -5, 0, math.NaN())
	m.AvoidedCall("chat", 0, 0, -1)

	reg := m.Registry()
	require.Equal(t, 5.0, value(t, reg, "idemguard_avoided_calls_total", map[string]string{"scope": "chat"}))
	require.Equal(t, 360.0, value(t, reg, "idemguard_avoided_tokens_total", map[string]string{"scope": "chat", "kind": "prompt"}))
	require.Equal(t, 90.0, value(t, reg, "idemguard_avoided_tokens_total", map[string]string{"scope": "chat", "kind": "completion"}))
	require.InDelta(t, 0.0045, value(t, reg, "idemguard_avoided_cost_total", map[string]string{"scope": "chat"}), 1e-12)
}

func TestProbeStoreTracksTheStore(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	var down atomic.Bool
	var probes atomic.Int64
	ping := func(ctx context.Context) error {
		probes.Add(1)
		if down.Load() {
			return errors.New("connection refused")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.ProbeStore(ctx, ping, time.Millisecond, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })

	storeUp := func() string {
		for _, line := range scrape(t, m) {
			if v, ok := strings.CutPrefix(line, "idemguard_store_up "); ok {
				return v
			}
		}
		return "absent"
	}
	require.Eventually(t, func() bool { return storeUp() == "1" }, 10*time.Second, time.Millisecond)
	down.Store(true)
	require.Eventually(t, func() bool { return storeUp() == "0" }, 10*time.Second, time.Millisecond)
	down.Store(false)
	require.Eventually(t, func() bool { return storeUp() == "1" }, 10*time.Second, time.Millisecond)
	text := strings.Join(scrape(t, m), "\n")
	require.NotContains(t, text, "idemguard_store_probe_duration_seconds_count 0\n")
	require.Greater(t, probes.Load(), int64(2))
}
