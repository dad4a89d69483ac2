package idemguard

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/engine"
	"github.com/idemguard/idemguard/sanitize"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func newTestGuard(t *testing.T, cfg Config) *Guard {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = NewMemoryStore()
	}
	cfg.Secret = testSecret
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	g, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	return g
}

// The public defaults are the engine's: they are written out (go doc shows
// a constant's expression), so this holds them together.
func TestDefaultsMatchEngine(t *testing.T) {
	t.Parallel()
	require.Equal(t, engine.DefaultTTL, DefaultTTL)
	require.Equal(t, engine.MaxTTL, MaxTTL)
	require.Equal(t, engine.DefaultStaleAfter, DefaultStaleAfter)
	require.Equal(t, engine.MinStaleAfter, MinStaleAfter)
	require.Equal(t, engine.DefaultMaxAttempts, DefaultMaxAttempts)
	require.Equal(t, engine.DefaultStoreTimeout, DefaultStoreTimeout)
	require.Equal(t, engine.DefaultMaxWait, DefaultMaxWait)
	require.Equal(t, engine.DefaultReplayCacheSize, DefaultReplayCacheSize)
	require.Equal(t, engine.DefaultReplayCacheMaxAge, DefaultReplayCacheMaxAge)
	require.Equal(t, string(engine.StaleTakeover), string(StaleTakeover))
	require.Equal(t, string(engine.StaleFail), string(StaleFail))
	for _, k := range []engine.EventKind{engine.EventClaimed, engine.EventReplayed, engine.EventInProgress,
		engine.EventWaited, engine.EventTakeover, engine.EventRetried, engine.EventAbandoned, engine.EventRetryLimit,
		engine.EventLostClaim, engine.EventMismatch, engine.EventOperation, engine.EventStoreError, engine.EventDroppedField} {
		require.Equal(t, string(k), string(publicEvent(engine.Event{Kind: k}).Kind))
	}
}

// The exported API of the root package and of routers names no internal
// package: another module could not use it. go doc prints every exported
// declaration with its types.
func TestPublicAPINamesNoInternalPackage(t *testing.T) {
	t.Parallel()
	internalName := regexp.MustCompile(`(internal/|engine\.|mysqlstore\.|memstore\.|config\.|mysqlconn\.|keys\.|ops\.|dbmigrate\.|metrics\.|guarderr\.)`)
	for _, pkg := range []string{".", "./routers"} {
		out, err := exec.Command("go", "doc", "-all", pkg).CombinedOutput()
		require.NoError(t, err, string(out))
		require.NotEmpty(t, out)
		for i, line := range bytes.Split(out, []byte("\n")) {
			require.Falsef(t, internalName.Match(line), "go doc -all %s line %d names an internal package: %s", pkg, i+1, line)
		}
	}
	out, err := exec.Command("go", "doc", ".").CombinedOutput()
	require.NoError(t, err, string(out))
	for _, want := range []string{"func New(cfg Config) (*Guard, error)",
		"func NewMySQLStore(db *sql.DB) Store", "func NewMemoryStore() Store"} {
		require.Contains(t, string(out), want)
	}
	out, err = exec.Command("go", "doc", ".", "Guard").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "func (g *Guard) WithIdempotency(ctx context.Context, call Call, op Operation) (Result, error)")
}

func TestErrorsAreTheEnginesAndConverted(t *testing.T) {
	t.Parallel()
	require.Same(t, engine.ErrOwnershipLost, ErrOwnershipLost)
	var se *StoreError
	err := publicError(&engine.StoreError{Op: "claim", Err: ErrShuttingDown})
	require.ErrorAs(t, err, &se)
	require.Equal(t, "claim", se.Op)
	require.ErrorIs(t, err, ErrStoreUnavailable)
	require.ErrorIs(t, err, ErrShuttingDown)
	var pe *PanicError
	require.ErrorAs(t, publicError(&engine.PanicError{Value: 1}), &pe)
}

// Close cancels a running operation with cause ErrShuttingDown, the root
// value; calls after Close get a *StoreError.
func TestCloseCauseIsPublicSentinel(t *testing.T) {
	t.Parallel()
	g, err := New(Config{Store: NewMemoryStore(), Secret: testSecret, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	started := make(chan struct{})
	causes := make(chan error, 1)
	done := make(chan Result, 1)
	go func() {
		res, _ := g.WithIdempotency(context.Background(), Call{Tenant: "t", Scope: "s", ClientKey: "k"},
			func(ctx context.Context) (any, error) {
				close(started)
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return nil, ctx.Err()
			})
		done <- res
	}()
	<-started
	require.NoError(t, g.Close(context.Background()))
	// Close returned only after the cut-off operation had seen its cause
	// and finished: the cause is there already.
	require.Len(t, causes, 1, "Close returned before the operation ended")
	cause := <-causes
	require.True(t, cause == ErrShuttingDown, "cause %v", cause)
	res := <-done
	require.Equal(t, StatusFailed, res.Status)
	require.Equal(t, sanitize.Timeout, res.StopReason)

	_, err = g.WithIdempotency(context.Background(), Call{Tenant: "t", Scope: "s", ClientKey: "k2"},
		func(ctx context.Context) (any, error) { return nil, nil })
	var se *StoreError
	require.ErrorAs(t, err, &se)
	require.ErrorIs(t, err, ErrShuttingDown)
}

// A wrapped OpError sets the stored stop reason; Result.Err is the
// operation's own error; Observe gets public events.
func TestOpErrorWrappedAndEvents(t *testing.T) {
	t.Parallel()
	var kinds []EventKind
	g := newTestGuard(t, Config{Observe: func(e Event) { kinds = append(kinds, e.Kind) }})
	opErr := &OpError{Reason: sanitize.RateLimited, Err: errors.New("429")}
	res, err := g.WithIdempotency(context.Background(), Call{Tenant: "t", Scope: "s", Inputs: map[string]any{"a": 1}},
		func(ctx context.Context) (any, error) { return nil, errors.Join(errors.New("wrapped"), opErr) })
	require.NoError(t, err)
	require.Equal(t, StatusFailed, res.Status)
	require.Equal(t, sanitize.RateLimited, res.StopReason)
	require.ErrorIs(t, res.Err, opErr)
	require.Equal(t, []EventKind{EventClaimed, EventOperation}, kinds)

	info, err := g.LookupHash(context.Background(), "t", "s", res.KeyHash)
	require.NoError(t, err)
	require.Equal(t, KeyFailed, info.Status)
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Secret: testSecret})
	require.ErrorContains(t, err, "Config.Store is required")
	_, err = New(Config{Store: NewMemoryStore(), Secret: []byte("short")})
	require.ErrorContains(t, err, "idemguard: Config.Secret must be at least 32 bytes")
	_, err = New(Config{Store: NewMemoryStore(), Secret: testSecret, Defaults: Settings{TTL: time.Millisecond}})
	require.ErrorContains(t, err, "TTL")
}
