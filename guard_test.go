package idemguard

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func newTestGuard(t *testing.T, cfg Config) *Guard {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = memstore.New()
	}
	cfg.Secret = testSecret
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	g, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	return g
}

// The exported API of the root package and of routers names no internal
// package: another module could not use it. go doc prints every exported
// declaration with its types.
func TestPublicAPINamesNoInternalPackage(t *testing.T) {
	t.Parallel()
	internalName := regexp.MustCompile(`(internal/|\b(engine|mysqlstore|testhooks|config|mysqlconn|keys|ops|dbmigrate|metrics|guarderr|storeseam|live)\.[A-Z])`)
	for _, pkg := range []string{".", "./routers", "./mysql", "./store", "./store/memstore", "./store/storetest", "./idemguardtest"} {
		out, err := exec.Command("go", "doc", "-all", pkg).CombinedOutput()
		require.NoError(t, err, string(out))
		require.NotEmpty(t, out)
		for i, line := range bytes.Split(out, []byte("\n")) {
			require.Falsef(t, internalName.Match(line), "go doc -all %s line %d names an internal package: %s", pkg, i+1, line)
		}
	}
	out, err := exec.Command("go", "doc", ".").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "func New(cfg Config) (*Guard, error)")
	out, err = exec.Command("go", "doc", "./store/memstore").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "func New(opts ...Option) *Store")
	out, err = exec.Command("go", "doc", ".", "Guard").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "func (g *Guard) Do(ctx context.Context, call Call, op Operation) (Result, error)")
	out, err = exec.Command("go", "doc", "./mysql").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "func NewStore(db *sql.DB) store.Store")
}

// A program that guards with the memstore.Store links no database driver, no
// SQL toolkit, no migration tool and no JWT library: those live in package
// mysql and under routers.
func TestRootPackageLinksNoDatabaseOrJWT(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, string(out))
	deps := string(out)
	require.Contains(t, deps, "github.com/idemguard/idemguard/sanitize", "the listing is the root package's")
	for _, dep := range strings.Fields(deps) {
		for _, banned := range []string{"go-sql-driver", "jmoiron/sqlx", "pressly/goose", "jwt", "jwkset", "keyfunc", "gin-gonic"} {
			require.NotContains(t, dep, banned, "package idemguard depends on %s", dep)
		}
	}
}

// Close cancels a running operation with cause ErrShuttingDown, the root
// value; calls after Close get a *StoreError.
func TestCloseCauseIsPublicSentinel(t *testing.T) {
	t.Parallel()
	g, err := New(Config{Store: memstore.New(), Secret: testSecret, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	started := make(chan struct{})
	causes := make(chan error, 1)
	done := make(chan Result, 1)
	go func() {
		res, _ := g.Do(context.Background(), Call{Tenant: "t", Scope: "s", ClientKey: "k"},
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

	_, err = g.Do(context.Background(), Call{Tenant: "t", Scope: "s", ClientKey: "k2"},
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
	res, err := g.Do(context.Background(), Call{Tenant: "t", Scope: "s", Inputs: map[string]any{"a": 1}},
		func(ctx context.Context) (any, error) { return nil, errors.Join(errors.New("wrapped"), opErr) })
	require.NoError(t, err)
	require.Equal(t, StatusFailed, res.Status)
	require.Equal(t, sanitize.RateLimited, res.StopReason)
	require.ErrorIs(t, res.Err, opErr)
	require.Equal(t, []EventKind{EventClaimed, EventOperation}, kinds)

	info, err := g.Lookup(context.Background(), Key{tenant: "t", scope: "s", hash: res.KeyHash})
	require.NoError(t, err)
	require.Equal(t, store.RowFailed, info.Status)
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Secret: testSecret})
	require.ErrorContains(t, err, "Config.Store is required")
	_, err = New(Config{Store: memstore.New(), Secret: []byte("short")})
	require.ErrorContains(t, err, "idemguard: Config.Secret must be at least 32 bytes")
	_, err = New(Config{Store: memstore.New(), Secret: testSecret, Defaults: Settings{TTL: time.Millisecond}})
	require.ErrorContains(t, err, "TTL")
}

// A Key is made only by a Guard: a malformed hash or client key is
// ErrInvalidInput when the Key is made, and the zero Key is refused by every
// verb that takes one.
func TestKeyIsValidatedWhereItIsMade(t *testing.T) {
	t.Parallel()
	g := newTestGuard(t, Config{})
	ctx := context.Background()
	_, err := g.KeyOfHash("acme", "s", "not-a-hash")
	require.ErrorIs(t, err, ErrInvalidInput)
	_, err = g.KeyOfHash("acme", "s", strings.Repeat("A", 64))
	require.ErrorIs(t, err, ErrInvalidInput, "upper-case hex is not a key hash")
	_, err = g.Key("acme", "s", "bad key")
	require.ErrorIs(t, err, ErrInvalidInput)
	_, err = g.Key("", "s", "k")
	require.ErrorIs(t, err, ErrInvalidInput)
	k, err := g.Key("acme", "s", "k")
	require.NoError(t, err)
	byHash, err := g.KeyOfHash("acme", "s", k.Hash())
	require.NoError(t, err)
	require.Equal(t, k.Hash(), byHash.Hash())

	var zero Key
	_, err = g.Lookup(ctx, zero)
	require.ErrorIs(t, err, ErrInvalidInput)
	require.ErrorIs(t, g.Cancel(ctx, zero), ErrInvalidInput)
	_, err = g.Watch(ctx, zero, "")
	require.ErrorIs(t, err, ErrInvalidInput)
	_, err = g.History(ctx, zero)
	require.ErrorIs(t, err, ErrInvalidInput)
}
