package mysqlconn

import (
	"database/sql/driver"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// markedQuery is prepared on the server (Prepare); every other query goes as text.
const markedQuery = "INSERT INTO marked VALUES (?)"

func init() { Prepare(markedQuery) }

func execOn(t *testing.T, c *conn, query string) error {
	t.Helper()
	_, err := c.ExecContext(t.Context(), query, []driver.NamedValue{{Ordinal: 1, Value: int64(1)}})
	return err
}

// A marked query is prepared once per connection and executed as a
// prepared statement from then on; any other goes as text.
func TestMarkedQueryIsPreparedOncePerConnection(t *testing.T) {
	sock, _ := pipeSock(t)
	inner := &recordingConn{}
	c := wrap(inner, sock).(*conn)
	for range 3 {
		require.NoError(t, execOn(t, c, markedQuery))
	}
	require.Equal(t, 1, inner.prepares)
	require.Zero(t, inner.texts, "a marked query went as text")
	require.NoError(t, execOn(t, c, "INSERT INTO other VALUES (?)"))
	require.Equal(t, 1, inner.prepares, "an unmarked query was prepared")
	require.Equal(t, 1, inner.texts)
}

// A server that refuses to prepare (a MySQL error, such as
// max_prepared_stmt_count reached) gets the statement as text, on that
// connection from then on, without asking again.
func TestRefusedPrepareSendsTheText(t *testing.T) {
	sock, _ := pipeSock(t)
	inner := &recordingConn{prepareErr: &mysql.MySQLError{Number: 1461, Message: "Can't create more than max_prepared_stmt_count statements"}}
	c := wrap(inner, sock).(*conn)
	require.NoError(t, execOn(t, c, markedQuery))
	inner.prepareErr = nil
	require.NoError(t, execOn(t, c, markedQuery))
	require.Equal(t, 2, inner.texts)
	require.Zero(t, inner.prepares, "the connection asked to prepare again")
}

// A prepare that broke on the wire ran nothing: the statement is not sent
// (driver.ErrBadConn, which database/sql retries on another connection),
// and it is never executed on the broken connection.
func TestBrokenPrepareIsNotSent(t *testing.T) {
	sock, _ := pipeSock(t)
	inner := &recordingConn{prepareErr: mysql.ErrInvalidConn}
	c := wrap(inner, sock).(*conn)
	err := execOn(t, c, markedQuery)
	require.ErrorIs(t, err, driver.ErrBadConn)
	require.ErrorIs(t, err, mysql.ErrInvalidConn, "the cause is lost")
	require.Zero(t, inner.texts)
	require.Nil(t, inner.got.Done())
}

// An execution the server refuses because it lost the statement ran
// nothing: not sent, and the next execution on the connection prepares it
// again instead of failing the same way for the connection's life.
func TestLostStatementIsNotSentAndPreparedAgain(t *testing.T) {
	sock, _ := pipeSock(t)
	inner := &recordingConn{}
	c := wrap(inner, sock).(*conn)
	require.NoError(t, execOn(t, c, markedQuery))
	inner.stmtErr = &mysql.MySQLError{Number: 1243, Message: "Unknown prepared statement handler"}
	err := execOn(t, c, markedQuery)
	require.ErrorIs(t, err, driver.ErrBadConn)
	inner.stmtErr = nil
	require.NoError(t, execOn(t, c, markedQuery))
	require.Equal(t, 2, inner.prepares)
}
