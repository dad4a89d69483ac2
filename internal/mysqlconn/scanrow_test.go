package mysqlconn_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/internal/testdb"
)

// ScanRow reads one row, answers sql.ErrNoRows for none, and ends with its
// context, on a pool Open made and on one it did not (whose driver must
// then be handed the caller's context itself).
func TestScanRow(t *testing.T) {
	t.Parallel()
	dsn := testdb.ServerDSN(t)
	ours, err := mysqlconn.Open(t.Context(), dsn, mysqlconn.PoolConfig{MaxOpenConns: 2})
	require.NoError(t, err)
	defer ours.Close()
	normalized, err := mysqlconn.NormalizeDSN(dsn)
	require.NoError(t, err)
	theirs, err := sql.Open("mysql", normalized)
	require.NoError(t, err)
	defer theirs.Close()

	for name, db := range map[string]*sql.DB{"Open's pool": ours.DB, "another pool": theirs} {
		t.Run(name, func(t *testing.T) {
			var a, b int
			require.NoError(t, mysqlconn.ScanRow(t.Context(), db, `SELECT ?, ?`, []any{1, 2}, &a, &b))
			require.Equal(t, [2]int{1, 2}, [2]int{a, b})
			require.ErrorIs(t, mysqlconn.ScanRow(t.Context(), db, `SELECT 1 FROM DUAL WHERE FALSE`, nil, &a), sql.ErrNoRows)

			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			defer cancel()
			began := time.Now()
			require.ErrorIs(t, mysqlconn.ScanRow(ctx, db, `SELECT SLEEP(30)`, nil, &a), context.DeadlineExceeded)
			require.Less(t, time.Since(began), 10*time.Second, "the query ran on past its context")
			require.NoError(t, mysqlconn.ScanRow(t.Context(), db, `SELECT 3`, nil, &a))
			require.Equal(t, 3, a)
		})
	}
}
