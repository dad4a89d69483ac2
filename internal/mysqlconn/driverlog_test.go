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
