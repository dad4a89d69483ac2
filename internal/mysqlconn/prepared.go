package mysqlconn

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
)

// Statements prepared on the server
//
// A statement goes as text, its arguments interpolated by the driver
// (interpolateParams): one round trip, nothing kept on the server. The
// few statements of the hot paths (a fresh key's claim INSERT and
// completion UPDATE, a store replay's SELECT) are worth more: the server
// parses such a text on every run, and the driver escapes every argument
// into it. On a 2-vCPU VM with MariaDB on the same machine, a fresh key
// with its two statements prepared went from 0.90 to 0.98 of the text
// floor's throughput at concurrency 16 (the bench's audit suite), and a
// store replay from 1.0 to 1.2 of a text SELECT's at concurrency 1 (the
// replay suite); docs/BENCHMARKS.md has the runs.
//
// So a query marked with [Prepare] is prepared on each connection the
// first time that connection executes it (one round trip more, once), and
// executed from then on with the binary protocol (COM_STMT_EXECUTE; a
// query's rows come in binary form too), the same one round trip as the
// text. The statement lives as long as its
// connection: the server drops it when the connection closes, so a pool
// holds at most one per marked query per connection, far below
// max_prepared_stmt_count. If the server will not prepare it (a MySQL
// error: the statement limit reached, a proxy without prepared
// statements), that connection sends it as text from then on. A prepare
// that broke on the wire cannot have run the statement: that is
// driver.ErrBadConn, which database/sql retries on another connection and
// the store reads as not sent; so is an execution the server refused
// because it lost the statement or could not re-prepare it.

// prepared holds the queries marked with Prepare; it is written only by
// init functions, before any connection exists, and only read after.
var prepared = map[string]bool{}

// Prepare marks queries to be prepared on the server by the connections of
// every pool Open makes, and executed there with the binary protocol (see
// above). Call it from an init function only: the set is not locked.
func Prepare(queries ...string) {
	for _, q := range queries {
		prepared[q] = true
	}
}

// preparedStmt is a marked query prepared on a connection.
type preparedStmt interface {
	driver.StmtExecContext
	driver.StmtQueryContext
}

// exec runs query on c: through c's prepared statement when it is marked
// (preparing it on its first run on c), else as text. It runs on the
// armed context of the connection's ExecContext.
func (c *conn) exec(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	ds, err := c.stmtFor(ctx, query)
	if err != nil {
		return nil, err
	}
	if ds == nil {
		return c.execer.ExecContext(ctx, query, args)
	}
	res, err := ds.ExecContext(ctx, args)
	return res, c.lost(query, err)
}

// query is exec for a query: its rows come in the binary protocol when it
// is marked.
func (c *conn) query(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	ds, err := c.stmtFor(ctx, query)
	if err != nil {
		return nil, err
	}
	if ds == nil {
		return c.queryer.QueryContext(ctx, query, args)
	}
	rows, err := ds.QueryContext(ctx, args)
	if err = c.lost(query, err); err != nil {
		return nil, err
	}
	return rows, nil
}

// stmtFor is c's prepared statement of query, prepared now if it is marked
// and c has not prepared it yet; nil when query goes as text.
func (c *conn) stmtFor(ctx context.Context, query string) (preparedStmt, error) {
	if !prepared[query] {
		return nil, nil
	}
	ds, known := c.stmts[query]
	if known {
		return ds, nil
	}
	ds, err := c.prepareMarked(ctx, query)
	if err != nil {
		return nil, err
	}
	if c.stmts == nil {
		c.stmts = make(map[string]preparedStmt, len(prepared))
	}
	c.stmts[query] = ds // nil: the server refused; text on this connection
	return ds, nil
}

// lost is err, or driver.ErrBadConn when the server refused to run the
// prepared statement of query because it lost it or could not re-prepare
// it: it ran nothing. Not sent; the connection goes, and the statement
// with it.
func (c *conn) lost(query string, err error) error {
	if me := (*mysql.MySQLError)(nil); errors.As(err, &me) && (me.Number == errUnknownStmt || me.Number == errNeedReprepare) {
		delete(c.stmts, query)
		return fmt.Errorf("%w: the prepared statement: %w", driver.ErrBadConn, err)
	}
	return err
}

// Server errors by which an execution of a prepared statement ran nothing.
const (
	errUnknownStmt   = 1243 // ER_UNKNOWN_STMT_HANDLER: no such statement on this connection
	errNeedReprepare = 1615 // ER_NEED_REPREPARE: the table changed and re-preparing failed
)

// prepareMarked prepares query on c. A statement the server refused to
// prepare is nil and no error; a prepare that failed otherwise is
// driver.ErrBadConn: the statement it was for never ran.
func (c *conn) prepareMarked(ctx context.Context, query string) (preparedStmt, error) {
	ds, err := c.prepare.PrepareContext(ctx, query)
	var me *mysql.MySQLError
	switch {
	case err == nil:
		if ps, ok := ds.(preparedStmt); ok {
			return ps, nil
		}
		_ = ds.Close()
		return nil, nil
	case errors.As(err, &me):
		return nil, nil
	default:
		return nil, fmt.Errorf("%w: preparing the statement: %w", driver.ErrBadConn, err)
	}
}
