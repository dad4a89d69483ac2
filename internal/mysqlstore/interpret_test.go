package mysqlstore_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
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
}
