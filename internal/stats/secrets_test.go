package stats

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/cleanup/cleanuptest"
	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/internal/testdb"
)

// The per-secret counts (`stats secrets`, and serve's check at start) read the covering index
// idx_idempotency_secret (migration 00017) alone, never the rows with their JSON responses.
func TestSecretRowsReadTheCoveringIndex(t *testing.T) {
	t.Parallel()
	d := testdb.New(t, testdb.WithPool(mysqlconn.PoolConfig{MaxOpenConns: 4}))
	ctx := t.Context()
	require.NoError(t, cleanuptest.Seed(ctx, d.DB, cleanuptest.Rows{Live: 5_000, Expired: 5_000}))
	_, err := d.DB.ExecContext(ctx, `ANALYZE TABLE idempotency_keys`)
	require.NoError(t, err)
	plans := testdb.Explain(t, d.DB, secretRowsSQL)
	require.Len(t, plans, 1)
	p := plans[0]
	require.Equal(t, "idx_idempotency_secret", p["key"], "plan: %v", p)
	require.Contains(t, p["Extra"], "Using index", "plan: %v", p)

	rows, _, err := CollectSecretRows(ctx, d.DB)
	require.NoError(t, err)
	require.Len(t, rows, 1, "the seeded rows carry no secret id")
	require.Equal(t, "", rows[0].SecretID)
	require.EqualValues(t, 5_000, rows[0].Live)
}
