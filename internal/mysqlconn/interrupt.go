package mysqlconn

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Statements without a watcher goroutine
//
// go-sql-driver/mysql honours a statement's context with a goroutine per
// connection: every statement on a context that can end hands the context
// to that goroutine and, when the answer is in, hands it a second message,
// so that it stops watching. Each hand-off makes a goroutine runnable, and
// on a machine whose idle threads sleep, waking one costs more than the
// rest of a short statement's client side: measured in serve on a 2-vCPU
// VM, the claim INSERT of a stream waited about 190 µs a statement for the
// scheduler, in the driver's finish. The pool therefore gives the driver a
// context that cannot end, and ends the statement itself when the caller's
// context does: context.AfterFunc (no goroutine unless the context ends)
// sets a deadline in the past on the connection's socket, which stops the
// driver's read or write at once. That is what the driver's watcher does
// too (it closes the socket), with the same result: the statement fails
// with the context's error, and the connection, whose protocol state is
// lost, is never used again.
//
// Only connections the pool dialed itself (TCP and unix sockets) are
// handled so; any other keeps the driver's watcher.

// errInterrupted is what the socket of an interrupted statement answers.
// The driver logs a failed read it did not cancel itself; DriverLogger
// drops lines carrying this error, which the caller gets as its
// context's error.
var errInterrupted = errors.New("mysqlconn: statement interrupted: its context ended")

// pastDeadline stops a socket's pending and future reads and writes.
var pastDeadline = time.Unix(1, 0)

// interruptible is a connection's socket that a statement's end of
// context can stop: once interrupted, every read and write fails with
// errInterrupted, whatever deadline the driver sets after that.
type interruptible struct {
	net.Conn
	stopped atomic.Bool
	// raw is the socket's syscall.RawConn (nil: the socket has none),
	// made once: the driver asks for it at every reuse of the connection.
	raw syscall.RawConn
}

// newInterruptible is c, interruptible.
func newInterruptible(c net.Conn) *interruptible {
	ic := &interruptible{Conn: c}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			ic.raw = raw
		}
	}
	return ic
}

func (c *interruptible) interrupt() {
	c.stopped.Store(true)
	_ = c.Conn.SetDeadline(pastDeadline)
}

func (c *interruptible) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && c.stopped.Load() {
		err = errInterrupted
	}
	return n, err
}

func (c *interruptible) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil && c.stopped.Load() {
		err = errInterrupted
	}
	return n, err
}

// The driver sets deadlines of its own (readTimeout, writeTimeout, the
// idle connection check); after an interruption they must not lift it.
// The flag is read after the deadline is set: an interrupt that lands
// between the two sets the past deadline after the driver's.

func (c *interruptible) SetDeadline(t time.Time) error {
	err := c.Conn.SetDeadline(t)
	if c.stopped.Load() {
		return c.Conn.SetDeadline(pastDeadline)
	}
	return err
}

func (c *interruptible) SetReadDeadline(t time.Time) error {
	err := c.Conn.SetReadDeadline(t)
	if c.stopped.Load() {
		return c.Conn.SetDeadline(pastDeadline)
	}
	return err
}

func (c *interruptible) SetWriteDeadline(t time.Time) error {
	err := c.Conn.SetWriteDeadline(t)
	if c.stopped.Load() {
		return c.Conn.SetDeadline(pastDeadline)
	}
	return err
}

// SyscallConn lets the driver check an idle connection's socket before
// reusing it, as it does on a socket of its own. A net.Conn's RawConn is
// its file descriptor's, for its whole life (once closed, its methods
// fail as a new one's would), so the one made at the dial serves.
func (c *interruptible) SyscallConn() (syscall.RawConn, error) {
	if c.raw != nil {
		return c.raw, nil
	}
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// dialed carries, from the breaker's Connect to the dial function, where
// the dialed socket goes (a context value: the driver dials inside its
// Connect).
type dialed struct{ conn *interruptible }

type dialedKey struct{}

// dial is the driver's dial function for TCP and unix sockets.
func dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	ic := newInterruptible(c)
	if slot, ok := ctx.Value(dialedKey{}).(*dialed); ok {
		slot.conn = ic
	}
	return ic, nil
}

// conn is a driver connection whose statements run without the driver's
// watcher. Everything else is the driver's.
type conn struct {
	driver.Conn
	sock    *interruptible
	execer  driver.ExecerContext
	queryer driver.QueryerContext
	begin   driver.ConnBeginTx
	prepare driver.ConnPrepareContext
	pinger  driver.Pinger
	reset   driver.SessionResetter
	valid   driver.Validator
	checker driver.NamedValueChecker
	// stmts are the marked queries prepared on this connection (nil: the
	// server refused, sent as text); see prepared.go. A connection runs
	// one statement at a time, so it needs no lock.
	stmts map[string]preparedStmt
}

// wrap returns dc as a conn over sock, or dc itself when it lacks one of
// the interfaces database/sql uses (then the driver's watcher stays).
func wrap(dc driver.Conn, sock *interruptible) driver.Conn {
	if sock == nil {
		return dc
	}
	c := &conn{Conn: dc, sock: sock}
	var ok [8]bool
	c.execer, ok[0] = dc.(driver.ExecerContext)
	c.queryer, ok[1] = dc.(driver.QueryerContext)
	c.begin, ok[2] = dc.(driver.ConnBeginTx)
	c.prepare, ok[3] = dc.(driver.ConnPrepareContext)
	c.pinger, ok[4] = dc.(driver.Pinger)
	c.reset, ok[5] = dc.(driver.SessionResetter)
	c.valid, ok[6] = dc.(driver.Validator)
	c.checker, ok[7] = dc.(driver.NamedValueChecker)
	for _, has := range ok {
		if !has {
			return dc
		}
	}
	return c
}

var (
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
)

// armed is a statement's interruption, armed on the caller's context ctx
// until release.
type armed struct {
	ctx  context.Context
	sock *interruptible
	stop func() bool
	done sync.WaitGroup // the interruption, once it started
}

// arm is the context a statement runs on in the driver, and its armed
// interruption: ctx's values without its end, and the pool's own watch of
// its end (nil when ctx cannot end, and the statement runs on ctx). An
// ended ctx is its error: nothing is sent, as the driver answers.
func (c *conn) arm(ctx context.Context) (context.Context, *armed, error) {
	ctx = attached(ctx)
	if ctx.Done() == nil {
		return ctx, nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	a := &armed{ctx: ctx, sock: c.sock}
	a.done.Add(1)
	a.stop = context.AfterFunc(ctx, func() {
		defer a.done.Done()
		c.sock.interrupt()
	})
	return context.WithoutCancel(ctx), a, nil
}

// release disarms a, and answers err (the statement's) or, when the
// interruption fired and the statement failed, ctx's error (the statement
// may have been cut off, and the connection is unusable). It waits for a
// running interruption to finish, so that no deadline is set on a
// connection after it went back to the pool.
func (a *armed) release(err error) error {
	if a == nil || a.stop() {
		return err // disarmed before it fired
	}
	a.done.Wait()
	if err != nil {
		return a.ctx.Err()
	}
	return nil // the answer was in first; the connection goes all the same (IsValid)
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	run, a, err := c.arm(ctx)
	if err != nil {
		return nil, err
	}
	res, err := c.exec(run, query, args)
	if err = a.release(err); err != nil {
		return nil, err
	}
	return res, nil
}

// QueryContext keeps the interruption armed until the rows are closed:
// they are read from the socket after it returns.
func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	run, a, err := c.arm(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := c.query(run, query, args)
	if err != nil || a == nil {
		return rows, a.release(err)
	}
	return &guardedRows{Rows: rows, armed: a}, nil
}

// guardedRows are a query's rows under its armed interruption; a read
// the interruption stopped fails with the context's error, as the
// driver's rows fail when it cancels them.
type guardedRows struct {
	driver.Rows
	armed *armed
}

func (r *guardedRows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err != nil && r.armed.sock.stopped.Load() {
		if cerr := r.armed.ctx.Err(); cerr != nil {
			return cerr
		}
	}
	return err
}

func (r *guardedRows) Close() error { return r.armed.release(r.Rows.Close()) }

// The driver's optional rows interfaces, passed through.

func (r *guardedRows) HasNextResultSet() bool {
	n, ok := r.Rows.(driver.RowsNextResultSet)
	return ok && n.HasNextResultSet()
}

func (r *guardedRows) NextResultSet() error {
	if n, ok := r.Rows.(driver.RowsNextResultSet); ok {
		return n.NextResultSet()
	}
	return io.EOF
}

func (r *guardedRows) ColumnTypeScanType(i int) reflect.Type {
	if t, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *guardedRows) ColumnTypeDatabaseTypeName(i int) string {
	if t, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *guardedRows) ColumnTypeNullable(i int) (nullable, ok bool) {
	if t, has := r.Rows.(driver.RowsColumnTypeNullable); has {
		return t.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *guardedRows) ColumnTypePrecisionScale(i int) (precision, scale int64, ok bool) {
	if t, has := r.Rows.(driver.RowsColumnTypePrecisionScale); has {
		return t.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}

func (r *guardedRows) ColumnTypeLength(i int) (length int64, ok bool) {
	if t, has := r.Rows.(driver.RowsColumnTypeLength); has {
		return t.ColumnTypeLength(i)
	}
	return 0, false
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.begin.BeginTx(ctx, opts)
}

// PrepareContext prepares query on the server, on ctx as a statement runs
// (armed), and returns the statement with the same interruption for its
// executions; a driver statement without the context interfaces is
// returned as it is (it keeps the driver's watcher).
func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	run, a, err := c.arm(ctx)
	if err != nil {
		return nil, err
	}
	ds, err := c.prepare.PrepareContext(run, query)
	if err = a.release(err); err != nil {
		if ds != nil {
			_ = ds.Close()
		}
		return nil, err
	}
	execer, ok1 := ds.(driver.StmtExecContext)
	queryer, ok2 := ds.(driver.StmtQueryContext)
	if !ok1 || !ok2 {
		return ds, nil
	}
	return &stmt{Stmt: ds, c: c, execer: execer, queryer: queryer}, nil
}

// stmt is a prepared statement whose executions run as the connection's
// statements do: on a context that cannot end, stopped by the pool's own
// watch of the caller's. Arguments are checked by the connection's
// NamedValueChecker (database/sql's fallback when a statement has none).
type stmt struct {
	driver.Stmt
	c       *conn
	execer  driver.StmtExecContext
	queryer driver.StmtQueryContext
}

var (
	_ driver.StmtExecContext  = (*stmt)(nil)
	_ driver.StmtQueryContext = (*stmt)(nil)
)

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	run, a, err := s.c.arm(ctx)
	if err != nil {
		return nil, err
	}
	res, err := s.execer.ExecContext(run, args)
	if err = a.release(err); err != nil {
		return nil, err
	}
	return res, nil
}

// QueryContext keeps the interruption armed until the rows are closed, as
// the connection's QueryContext does.
func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	run, a, err := s.c.arm(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.queryer.QueryContext(run, args)
	if err != nil || a == nil {
		return rows, a.release(err)
	}
	return &guardedRows{Rows: rows, armed: a}, nil
}

func (c *conn) Ping(ctx context.Context) error { return c.pinger.Ping(ctx) }

// ResetSession refuses a connection whose statement was interrupted.
func (c *conn) ResetSession(ctx context.Context) error {
	if c.sock.stopped.Load() {
		return driver.ErrBadConn
	}
	return c.reset.ResetSession(ctx)
}

// IsValid is false once a statement was interrupted: the pool drops the
// connection instead of keeping it.
func (c *conn) IsValid() bool { return !c.sock.stopped.Load() && c.valid.IsValid() }

func (c *conn) CheckNamedValue(nv *driver.NamedValue) error { return c.checker.CheckNamedValue(nv) }

// ScanRow runs query on a connection of db and scans
// its one row into dest (sql.ErrNoRows when there is none), ended by
// ctx's end like any statement of the pool. database/sql watches a
// query's context with a goroutine of its own until the rows are closed;
// here it is handed a context that cannot end (the connection itself
// watches ctx), so a point read starts no goroutine. The connection is
// taken from the pool under ctx, as a query's is. On a pool Open did not
// make, it is db.QueryRowContext.
func ScanRow(ctx context.Context, db *sql.DB, query string, args []any, dest ...any) error {
	if ctx.Done() == nil {
		return db.QueryRowContext(ctx, query, args...).Scan(dest...)
	}
	var err error
	for range maxBadConnTries {
		if err = scanRowOnce(ctx, db, query, args, dest); !errors.Is(err, driver.ErrBadConn) {
			return err
		}
	}
	return err
}

// maxBadConnTries is how often ScanRow takes a connection for a statement
// that a stale one refused before it was sent (driver.ErrBadConn), as
// database/sql's own QueryRowContext does: a query on a sql.Conn is not
// retried by database/sql.
const maxBadConnTries = 3

func scanRowOnce(ctx context.Context, db *sql.DB, query string, args, dest []any) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	qctx := ctx
	_ = c.Raw(func(dc any) error {
		if _, ours := dc.(*conn); ours {
			qctx = detached{ctx} // else the driver would be handed a context that cannot end
		}
		return nil
	})
	return c.QueryRowContext(qctx, query, args...).Scan(dest...)
}

// detached is a context that cannot end, carrying one that can: what
// database/sql sees of a ScanRow's context. The pool's connection ends the
// statement when the carried context ends (attached).
type detached struct{ context.Context }

func (detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (detached) Done() <-chan struct{}       { return nil }
func (detached) Err() error                  { return nil }

// attached is the context a statement ends with: the one a detached
// context carries, or ctx itself.
func attached(ctx context.Context) context.Context {
	if d, ok := ctx.(detached); ok {
		return d.Context
	}
	return ctx
}

// isInterrupted reports whether err is an interrupted socket's.
func isInterrupted(err error) bool { return errors.Is(err, errInterrupted) }
