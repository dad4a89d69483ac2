package mysqlstore_test

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/engine"
	"github.com/idemguard/idemguard/internal/mysqlstore"
)

// Driver errors are translated by number in one place; the message text is
// never read (MySQL and MariaDB word them differently).
func TestInterpretError(t *testing.T) {
	t.Parallel()
	require.NoError(t, mysqlstore.InterpretError(nil))
	require.ErrorIs(t, mysqlstore.InterpretError(sql.ErrNoRows), engine.ErrNotFound)
	require.ErrorIs(t, mysqlstore.InterpretError(fmt.Errorf("wrapped: %w", sql.ErrNoRows)), engine.ErrNotFound)
	require.ErrorIs(t, mysqlstore.InterpretError(&mysql.MySQLError{Number: 1062, Message: "anything"}), engine.ErrDuplicate)
	// Galera certification failure / TiDB write conflict / InnoDB deadlock.
	require.ErrorIs(t, mysqlstore.InterpretError(&mysql.MySQLError{Number: 1213, Message: "Deadlock found"}), mysqlstore.ErrLostRace)
	// A message that merely mentions a duplicate is not one.
	other := &mysql.MySQLError{Number: 1205, Message: "Duplicate entry (lock wait timeout)"}
	got := mysqlstore.InterpretError(other)
	require.Same(t, error(other), got)
	require.False(t, errors.Is(got, engine.ErrDuplicate))
	conn := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	require.Same(t, conn, mysqlstore.InterpretError(conn))
}
