package mysqlconn_test

import (
	"context"
	"encoding/json"
	"log"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/internal/testlog"
)

// The driver's own line about a server that hangs up mid-handshake comes out as one JSON
// record, not as "[mysql] packets.go:58 ..." text in the JSON stream. Not parallel: the driver's
// logger is process-wide and set without a lock, so this runs while no other test of the
// package is.
func TestDriverLinesAreJSON(t *testing.T) {
	var buf testlog.Buffer
	mysqlconn.LogDriverTo(slog.New(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(func() { _ = mysql.SetLogger(log.New(os.Stderr, "[mysql] ", log.Ldate|log.Ltime)) })

	// A "server" that accepts and closes at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = mysqlconn.Open(ctx, "u:pw@tcp("+ln.Addr().String()+")/db", mysqlconn.PoolConfig{MaxOpenConns: 1})
	require.Error(t, err)

	out := strings.TrimSpace(buf.String())
	require.NotEmpty(t, out, "the driver logged nothing")
	for _, line := range strings.Split(out, "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "not JSON: %s", line)
		require.Equal(t, "WARN", rec["level"])
		require.Equal(t, "mysqlconn: driver", rec["msg"])
		require.Regexp(t, `^\w+\.go:\d+$`, rec["driver_source"])
		require.NotEmpty(t, rec["driver_msg"])
	}
	require.NotContains(t, out, "[mysql]")
}

// A statement its caller's context ends is stopped at once with the
// context's error, on the real server; the pool drops its connection and
// goes on serving, and the driver logs nothing about it (the caller has the
// error). Not parallel: the driver's logger is process-wide.
func TestInterruptedStatementOnTheServer(t *testing.T) {
	var buf testlog.Buffer
	mysqlconn.LogDriverTo(slog.New(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(func() { _ = mysql.SetLogger(log.New(os.Stderr, "[mysql] ", log.Ldate|log.Ltime)) })
	db, err := mysqlconn.Open(t.Context(), testdb.ServerDSN(t), mysqlconn.PoolConfig{MaxOpenConns: 1})
	require.NoError(t, err)
	defer db.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err = db.ExecContext(ctx, `DO SLEEP(30)`)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(began), 10*time.Second, "the statement ran on past its context")

	var one int
	ctx, cancel = context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	began = time.Now()
	require.ErrorIs(t, db.QueryRowContext(ctx, `SELECT SLEEP(30)`).Scan(&one), context.DeadlineExceeded)
	require.Less(t, time.Since(began), 10*time.Second, "the query ran on past its context")

	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT 1`).Scan(&one))
	require.Equal(t, 1, one)
	require.Empty(t, strings.TrimSpace(buf.String()), "the driver logged the interruption")
}
