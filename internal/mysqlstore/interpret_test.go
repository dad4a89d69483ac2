package mysqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/store"
)

// Driver errors are translated by number in one place; the message text is
// never read (MySQL and MariaDB word them differently).
func TestInterpretError(t *testing.T) {
	t.Parallel()
	require.NoError(t, mysqlstore.InterpretError(nil))
	require.ErrorIs(t, mysqlstore.InterpretError(sql.ErrNoRows), idemguard.ErrNotFound)
	require.ErrorIs(t, mysqlstore.InterpretError(fmt.Errorf("wrapped: %w", sql.ErrNoRows)), idemguard.ErrNotFound)
	require.ErrorIs(t, mysqlstore.InterpretError(&mysql.MySQLError{Number: 1062, Message: "anything"}), store.ErrDuplicate)
	// Galera certification failure / TiDB write conflict / InnoDB deadlock,
	// a lock wait timeout, a Group Replication (multi-primary InnoDB
	// Cluster) certification failure, TiDB's optimistic write conflict: the
	// outcome is unknown, never "lost the race".
	for _, n := range []uint16{1213, 1205, 3101, 9007} {
		me := &mysql.MySQLError{Number: n, Message: "Duplicate entry (deadlock)"}
		got := mysqlstore.InterpretError(me)
		require.ErrorIs(t, got, store.ErrOutcomeUnknown, "error %d", n)
		require.ErrorIs(t, got, me, "error %d keeps the driver's error", n)
		require.False(t, errors.Is(got, store.ErrDuplicate), "error %d", n)
	}
	// A message that merely mentions a duplicate is not one.
	other := &mysql.MySQLError{Number: 1146, Message: "Duplicate entry (no such table)"}
	got := mysqlstore.InterpretError(other)
	require.Same(t, error(other), got)
	require.False(t, errors.Is(got, store.ErrDuplicate))
	conn := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	require.Same(t, conn, mysqlstore.InterpretError(conn))
	// A connection that broke after the statement was sent: it may have applied.
	require.ErrorIs(t, mysqlstore.InterpretError(mysql.ErrInvalidConn), store.ErrOutcomeUnknown)
	require.NotErrorIs(t, mysqlstore.InterpretError(mysql.ErrInvalidConn), store.ErrNotSent)

	// Proof that nothing was sent (the real values are in notsent_test.go):
	// the pool could not connect, the driver dialed, or it failed before
	// writing a byte.
	for _, err := range []error{
		&mysqlconn.ConnectError{Err: &mysql.MySQLError{Number: 1040, Message: "Too many connections"}},
		&mysqlconn.ConnectError{Err: context.DeadlineExceeded}, // the dial was cut short: still nothing sent
		&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED},
		driver.ErrBadConn,
		fmt.Errorf("wrapped: %w", driver.ErrBadConn),
	} {
		got := mysqlstore.InterpretError(err)
		require.ErrorIs(t, got, store.ErrNotSent, "%v", err)
		require.ErrorIs(t, got, err, "%v keeps the driver's error", err)
		require.NotErrorIs(t, got, store.ErrOutcomeUnknown, "%v", err)
	}
	// Anything that may have gone out is not.
	for _, err := range []error{
		&net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET},
		&net.OpError{Op: "read", Net: "tcp", Err: syscall.ETIMEDOUT},
		context.DeadlineExceeded,
		context.Canceled,
		io.EOF,
		io.ErrUnexpectedEOF,
		mysql.ErrInvalidConn,
		&mysql.MySQLError{Number: 1213},
	} {
		require.NotErrorIs(t, mysqlstore.InterpretError(err), store.ErrNotSent, "%v", err)
	}
}
