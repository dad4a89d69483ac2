// Package storetest is the conformance suite every idemguard.Store must pass.
// Each store's tests call Exercise once; every case gets a fresh store from
// the harness (for MySQL, a freshly migrated database), so cases run in
// parallel. Store-level cases prove the guarded statements on their own;
// guard-level cases drive Do over the store.
package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
)

// Harness gives the suite a fresh store and the few test-only powers it
// needs to stand in for time passing and for a broken database.
type Harness struct {
	Store idemguard.Store
	// Age moves every time of one row back by d, as if d had passed for it.
	Age func(t testing.TB, tenant, scope, keyHash string, d time.Duration)
	// Dump renders every row as one line of space-separated column values,
	// starting with tenant, scope and key_hash, then every other column
	// (for canary scans and for finding rows). An empty table is "".
	Dump func(t testing.TB) string
	// Break makes every later store call fail as if the database were gone.
	Break func(t testing.TB)
}

// Exercise runs the whole suite against the stores newHarness returns.
func Exercise(t *testing.T, newHarness func(t *testing.T) *Harness) {
	t.Helper()
	for name, tc := range storeCases {
		t.Run("Store/"+name, func(t *testing.T) {
			t.Parallel()
			tc(t, newHarness(t))
		})
	}
	for name, tc := range guardCases {
		t.Run("Guard/"+name, func(t *testing.T) {
			t.Parallel()
			tc(t, newHarness(t))
		})
	}
	exerciseJobs(t, newHarness)
}

// Secret is the HMAC secret the suite's guards use.
var Secret = []byte("storetest-secret-0123456789abcdef-0123")

// logBuffer captures a guard's JSON logs and mirrors them to t.Log.
type logBuffer struct {
	t  testing.TB
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Log(string(bytes.TrimSpace(p)))
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type guardOpt func(*idemguard.Config)

func newGuard(t testing.TB, h *Harness, opts ...guardOpt) (*idemguard.Guard, *logBuffer) {
	logs := &logBuffer{t: t}
	cfg := idemguard.Config{
		Store:  h.Store,
		Secret: Secret,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, o := range opts {
		o(&cfg)
	}
	g, err := idemguard.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, g.Close(ctx))
	})
	return g, logs
}

func withSecret(s []byte) guardOpt { return func(c *idemguard.Config) { c.Secret = s } }
func withoutCache() guardOpt       { return func(c *idemguard.Config) { c.ReplayCacheSize = -1 } }
func withHeartbeat(d time.Duration) guardOpt {
	return func(c *idemguard.Config) { c.Test.HeartbeatEvery = d }
}
func withObserver(f func(idemguard.Event)) guardOpt {
	return func(c *idemguard.Config) { c.Observe = f }
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// counter is an operation that counts its runs and returns a fixed envelope.
type counter struct {
	mu   sync.Mutex
	runs int
}

func (c *counter) n() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs
}

func (c *counter) op(value any, err error) idemguard.Operation {
	return func(context.Context) (any, error) {
		c.mu.Lock()
		c.runs++
		c.mu.Unlock()
		return value, err
	}
}

// sameExceptCached asserts a replay body equals the first body byte for byte
// once "cached" is set back to false.
func sameExceptCached(t testing.TB, first, replay []byte) {
	t.Helper()
	require.Contains(t, string(first), `"cached":false`)
	require.Contains(t, string(replay), `"cached":true`)
	require.Equal(t, string(first), string(bytes.Replace(replay, []byte(`"cached":true`), []byte(`"cached":false`), 1)))
}

func mustJSON(t testing.TB, v any) json.RawMessage {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
