package mysqlconn

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// recordingConn is a driver connection with every interface database/sql
// uses, recording the context its ExecContext was given; exec, when set,
// runs as the statement.
type recordingConn struct {
	driver.Conn
	got  context.Context
	exec func(ctx context.Context) error
	// prepareErr fails PrepareContext; prepares and texts count the
	// statements prepared and the statements executed as text.
	prepareErr error
	stmtErr    error // fails a prepared statement's executions
	prepares   int
	texts      int
}

func (r *recordingConn) ExecContext(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Result, error) {
	r.texts++
	return r.run(ctx)
}

func (r *recordingConn) run(ctx context.Context) (driver.Result, error) {
	r.got = ctx
	if r.exec != nil {
		if err := r.exec(ctx); err != nil {
			return nil, err
		}
	}
	return driver.RowsAffected(1), nil
}

func (r *recordingConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	return nil, errors.ErrUnsupported
}

func (r *recordingConn) BeginTx(context.Context, driver.TxOptions) (driver.Tx, error) {
	return nil, errors.ErrUnsupported
}

// PrepareContext records its context and returns a statement whose
// executions run exec, as the connection's do.
func (r *recordingConn) PrepareContext(ctx context.Context, _ string) (driver.Stmt, error) {
	r.got = ctx
	if r.prepareErr != nil {
		return nil, r.prepareErr
	}
	r.prepares++
	return &recordingStmt{c: r}, nil
}

// recordingStmt is a prepared statement of a recordingConn.
type recordingStmt struct{ c *recordingConn }

func (s *recordingStmt) ExecContext(ctx context.Context, _ []driver.NamedValue) (driver.Result, error) {
	if err := s.c.stmtErr; err != nil {
		return nil, err
	}
	return s.c.run(ctx)
}

func (s *recordingStmt) QueryContext(context.Context, []driver.NamedValue) (driver.Rows, error) {
	return nil, errors.ErrUnsupported
}
func (s *recordingStmt) Close() error  { return nil }
func (s *recordingStmt) NumInput() int { return -1 }
func (s *recordingStmt) Exec([]driver.Value) (driver.Result, error) {
	return nil, errors.ErrUnsupported
}
func (s *recordingStmt) Query([]driver.Value) (driver.Rows, error) { return nil, errors.ErrUnsupported }
func (r *recordingConn) Ping(context.Context) error                { return nil }
func (r *recordingConn) ResetSession(context.Context) error        { return nil }
func (r *recordingConn) IsValid() bool                             { return true }
func (r *recordingConn) CheckNamedValue(*driver.NamedValue) error  { return nil }
func (r *recordingConn) Close() error                              { return nil }
func (r *recordingConn) Prepare(string) (driver.Stmt, error)       { return nil, errors.ErrUnsupported }
func (r *recordingConn) Begin() (driver.Tx, error)                 { return nil, errors.ErrUnsupported }

// pipeSock is an interruptible over one end of a pipe, and the other end.
func pipeSock(t *testing.T) (*interruptible, net.Conn) {
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return &interruptible{Conn: a}, b
}

// The driver gets a context that cannot end, so that it starts no watcher
// hand-off for the statement; the values of the caller's context go with it.
func TestStatementRunsOnAContextThatCannotEnd(t *testing.T) {
	sock, _ := pipeSock(t)
	inner := &recordingConn{}
	c := wrap(inner, sock)
	require.IsType(t, &conn{}, c, "a connection with every interface is wrapped")
	type key struct{}
	ctx, cancel := context.WithTimeout(context.WithValue(t.Context(), key{}, "v"), time.Minute)
	defer cancel()
	_, err := c.(driver.ExecerContext).ExecContext(ctx, "DO 1", nil)
	require.NoError(t, err)
	require.Nil(t, inner.got.Done(), "the driver was handed a context that can end: it would watch it")
	require.Equal(t, "v", inner.got.Value(key{}))
	require.True(t, c.(driver.Validator).IsValid())
}

// A statement whose context ends while it waits for the server is stopped
// at once with the context's error, and its connection is not reused.
func TestStatementIsInterruptedWhenItsContextEnds(t *testing.T) {
	sock, _ := pipeSock(t) // nobody answers on the other end
	inner := &recordingConn{exec: func(context.Context) error {
		_, err := sock.Read(make([]byte, 1)) // the driver waiting for the answer
		return err
	}}
	c := wrap(inner, sock).(*conn)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err := c.ExecContext(ctx, "DO SLEEP(60)", nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, c.IsValid(), "an interrupted connection went back to the pool")
	require.ErrorIs(t, c.ResetSession(t.Context()), driver.ErrBadConn)
}

// A prepared statement runs as the connection's statements do: prepared
// and executed on a context that cannot end, and stopped at once, its
// connection never reused, when the caller's context ends.
func TestPreparedStatementIsInterruptedWhenItsContextEnds(t *testing.T) {
	sock, _ := pipeSock(t) // nobody answers on the other end
	inner := &recordingConn{}
	c := wrap(inner, sock).(*conn)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	ds, err := c.PrepareContext(ctx, "DO SLEEP(?)")
	require.NoError(t, err)
	require.Nil(t, inner.got.Done(), "the statement was prepared on a context that can end")
	inner.exec = func(context.Context) error {
		_, err := sock.Read(make([]byte, 1)) // the driver waiting for the answer
		return err
	}
	_, err = ds.(driver.StmtExecContext).ExecContext(ctx, []driver.NamedValue{{Ordinal: 1, Value: int64(60)}})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Nil(t, inner.got.Done(), "the driver was handed a context that can end: it would watch it")
	require.False(t, c.IsValid(), "an interrupted connection went back to the pool")
}

// A context that has ended already sends nothing.
func TestStatementOnAnEndedContextSendsNothing(t *testing.T) {
	sock, _ := pipeSock(t)
	inner := &recordingConn{}
	c := wrap(inner, sock).(*conn)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := c.ExecContext(ctx, "DO 1", nil)
	require.ErrorIs(t, err, context.Canceled)
	require.Nil(t, inner.got, "the statement reached the driver")
	require.True(t, c.IsValid())
}

// Once interrupted, a socket stays stopped whatever deadline the driver
// sets afterwards (its readTimeout, its writeTimeout, its idle check).
func TestInterruptOutlastsTheDriversDeadlines(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*interruptible, time.Time) error
	}{
		{"SetDeadline", (*interruptible).SetDeadline},
		{"SetReadDeadline", (*interruptible).SetReadDeadline},
		{"SetWriteDeadline", (*interruptible).SetWriteDeadline},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock, _ := pipeSock(t) // nobody reads or writes on the other end
			sock.interrupt()
			require.NoError(t, tc.set(sock, time.Now().Add(time.Hour)))
			errs := make(chan error, 2)
			go func() { _, err := sock.Read(make([]byte, 1)); errs <- err }()
			go func() { _, err := sock.Write([]byte{1}); errs <- err }()
			for range 2 {
				select {
				case err := <-errs:
					require.ErrorIs(t, err, errInterrupted)
				case <-time.After(10 * time.Second):
					t.Fatal("a read or write waited: the deadline lifted the interruption")
				}
			}
		})
	}
}

// A connection missing an interface database/sql uses keeps the driver's
// own handling.
func TestWrapLeavesAnIncompleteConnection(t *testing.T) {
	sock, _ := pipeSock(t)
	dc := fakeConn{}
	require.Equal(t, driver.Conn(dc), wrap(dc, sock))
	rc := &recordingConn{}
	require.Equal(t, driver.Conn(rc), wrap(rc, nil), "a connection the pool did not dial")
}

// staleConnector hands out wrapped connections whose first query is
// refused as by a stale connection (driver.ErrBadConn: nothing sent), and
// whose later ones answer one row.
type staleConnector struct {
	t       *testing.T
	refused atomic.Int32
}

func (s *staleConnector) Connect(context.Context) (driver.Conn, error) {
	sock, _ := pipeSock(s.t)
	return wrap(&staleConn{recordingConn: &recordingConn{}, owner: s}, sock), nil
}

func (s *staleConnector) Driver() driver.Driver { return nil }

type staleConn struct {
	*recordingConn
	owner *staleConnector
}

func (c *staleConn) QueryContext(context.Context, string, []driver.NamedValue) (driver.Rows, error) {
	if c.owner.refused.Add(1) == 1 {
		return nil, driver.ErrBadConn
	}
	return &oneRow{}, nil
}

type oneRow struct{ done bool }

func (*oneRow) Columns() []string { return []string{"n"} }
func (*oneRow) Close() error      { return nil }
func (r *oneRow) Next(dest []driver.Value) error {
	if r.done {
		return io.EOF
	}
	r.done = true
	dest[0] = int64(7)
	return nil
}

// A point read that a stale connection refused before sending it is read
// on another connection, as database/sql's own QueryRowContext does.
func TestScanRowRetriesAStaleConnection(t *testing.T) {
	connector := &staleConnector{t: t}
	db := sql.OpenDB(connector)
	defer db.Close()
	var n int
	require.NoError(t, ScanRow(t.Context(), db, "SELECT 7", nil, &n))
	require.Equal(t, 7, n)
	require.EqualValues(t, 2, connector.refused.Load())
}

// The RawConn the driver checks a reused connection with is the socket's
// own, made once at the dial: the same file descriptor, and no allocation
// per check.
func TestSyscallConnIsTheSocketsOwn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	fdOf := func(raw syscall.RawConn) uintptr {
		var fd uintptr
		require.NoError(t, raw.Control(func(f uintptr) { fd = f }))
		return fd
	}
	own, err := c.(syscall.Conn).SyscallConn()
	require.NoError(t, err)
	ic := newInterruptible(c)
	raw, err := ic.SyscallConn()
	require.NoError(t, err)
	require.Equal(t, fdOf(own), fdOf(raw))
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = ic.SyscallConn() }))
}
