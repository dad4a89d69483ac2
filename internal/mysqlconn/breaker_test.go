package mysqlconn

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeConnector fails while down is set, and counts its dials.
type fakeConnector struct {
	mu    sync.Mutex
	down  bool
	dials int
}

type fakeConn struct{ driver.Conn }

func (fakeConn) Close() error { return nil }

func (f *fakeConnector) Connect(ctx context.Context) (driver.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dials++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if f.down {
		return nil, syscall.ECONNREFUSED
	}
	return fakeConn{}, nil
}

func (f *fakeConnector) Driver() driver.Driver { return nil }

func (f *fakeConnector) set(down bool) { f.mu.Lock(); f.down = down; f.mu.Unlock() }
func (f *fakeConnector) count() int    { f.mu.Lock(); defer f.mu.Unlock(); return f.dials }

// Once a dial fails, the pool answers without dialing (Down) while one
// probe dials in the background, and connects again within a second of the
// server's return; Close stops the probe (the package's TestMain checks
// that no goroutine is left).
func TestBreakerFailsFastWhileDownAndProbes(t *testing.T) {
	t.Parallel()
	f := &fakeConnector{down: true}
	b := newBreaker(f)
	ctx := context.Background()

	_, err := b.Connect(ctx)
	var ce *ConnectError
	require.ErrorAs(t, err, &ce)
	require.False(t, ce.Down)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)

	dials := f.count()
	for range 100 {
		_, err := b.Connect(ctx)
		require.ErrorAs(t, err, &ce)
		require.True(t, ce.Down)
		require.ErrorIs(t, err, syscall.ECONNREFUSED, "the last attempt's error")
	}
	require.Less(t, f.count()-dials, 50, "callers dialed while the server was known down")

	f.set(false)
	back := time.Now()
	require.Eventually(t, func() bool { _, err := b.Connect(ctx); return err == nil }, time.Second, time.Millisecond)
	t.Logf("connected again %s after the return", time.Since(back))

	// Down again, and closed while down: the probe stops.
	f.set(true)
	_, err = b.Connect(ctx)
	require.Error(t, err)
	require.NoError(t, b.Close())
	_, err = b.Connect(ctx)
	require.ErrorAs(t, err, &ce)
}

// A dial its own caller cut short says nothing about the server: the pool
// is not marked down.
func TestBreakerIgnoresTheCallersDeadline(t *testing.T) {
	t.Parallel()
	f := &fakeConnector{}
	b := newBreaker(f)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Connect(ctx)
	var ce *ConnectError
	require.ErrorAs(t, err, &ce)
	require.False(t, ce.Down)
	require.True(t, errors.Is(err, context.Canceled))
	_, err = b.Connect(context.Background())
	require.NoError(t, err)
}
