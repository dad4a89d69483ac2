package testdb_test

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func schemaExists(t *testing.T, name string) bool {
	t.Helper()
	db, err := mysqlconn.Open(t.Context(), testdb.ServerDSN(t), mysqlconn.PoolConfig{MaxOpenConns: 1})
	require.NoError(t, err)
	defer db.Close()
	var n int
	require.NoError(t, db.GetContext(t.Context(), &n,
		`SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?`, name))
	return n == 1
}

func TestNewCreatesMigratesAndDrops(t *testing.T) {
	t.Parallel()
	var name string
	t.Run("use", func(t *testing.T) {
		d := testdb.New(t, testdb.WithPool(mysqlconn.PoolConfig{MaxOpenConns: 3}))
		name = d.Name
		require.Regexp(t, regexp.MustCompile(`^idemguard_t_[0-9a-f]{8}$`), d.Name)
		require.Equal(t, 3, d.DB.Stats().MaxOpenConnections)

		var current string
		require.NoError(t, d.DB.GetContext(t.Context(), &current, `SELECT DATABASE()`))
		require.Equal(t, d.Name, current)
		var n int
		require.NoError(t, d.DB.GetContext(t.Context(), &n, `SELECT COUNT(*) FROM idempotency_keys`))
		require.Zero(t, n, "migrated and empty")
		require.True(t, schemaExists(t, d.Name))
	})
	require.False(t, schemaExists(t, name), "database %s dropped at cleanup", name)
}

func TestNewEmptyIsNotMigrated(t *testing.T) {
	t.Parallel()
	d := testdb.NewEmpty(t)
	require.Equal(t, testdb.DefaultMaxOpenConns, d.DB.Stats().MaxOpenConnections)
	var n int
	require.NoError(t, d.DB.GetContext(t.Context(), &n,
		`SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()`))
	require.Zero(t, n)
	require.NotEqual(t, testdb.NewEmpty(t).Name, d.Name, "every call gets its own database")
}
