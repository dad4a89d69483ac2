package dbmigrate_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard/internal/dbmigrate"
	"github.com/idemguard/idemguard/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func tableExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRowContext(t.Context(),
		`SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`, name).Scan(&n))
	return n == 1
}

func TestUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testdb.NewEmpty(t).DB.DB

	pending, err := dbmigrate.Pending(ctx, db)
	require.NoError(t, err)
	require.True(t, pending, "fresh database")
	require.False(t, tableExists(t, db, dbmigrate.VersionTable), "Pending must not create the version table")

	st, err := dbmigrate.Status(ctx, db)
	require.NoError(t, err)
	require.NotEmpty(t, st)
	for _, s := range st {
		require.False(t, s.Applied, "version %d", s.Version)
		require.True(t, s.AppliedAt.IsZero())
	}
	require.Equal(t, int64(1), st[0].Version)
	require.Equal(t, "00001_create_idempotency_keys.sql", st[0].Source)

	require.NoError(t, dbmigrate.Up(ctx, db))
	require.True(t, tableExists(t, db, "idempotency_keys"))
	pending, err = dbmigrate.Pending(ctx, db)
	require.NoError(t, err)
	require.False(t, pending)

	var dbNow time.Time
	require.NoError(t, db.QueryRowContext(ctx, `SELECT UTC_TIMESTAMP(6)`).Scan(&dbNow))
	st, err = dbmigrate.Status(ctx, db)
	require.NoError(t, err)
	for _, s := range st {
		require.True(t, s.Applied, "version %d", s.Version)
		require.Equal(t, time.UTC, s.AppliedAt.Location())
		require.WithinDuration(t, dbNow, s.AppliedAt, time.Minute, "applied_at is the database's UTC clock")
	}

	// Up again is a no-op.
	require.NoError(t, dbmigrate.Up(ctx, db))

	// Roll everything back, one version at a time.
	for range st {
		require.NoError(t, dbmigrate.Down(ctx, db))
	}
	require.False(t, tableExists(t, db, "idempotency_keys"))
	require.ErrorIs(t, dbmigrate.Down(ctx, db), dbmigrate.ErrNothingToRollBack)
	pending, err = dbmigrate.Pending(ctx, db)
	require.NoError(t, err)
	require.True(t, pending)

	require.NoError(t, dbmigrate.Up(ctx, db))
	require.True(t, tableExists(t, db, "idempotency_keys"))
}

// Replicas starting together all run `migrate up`: every call succeeds and each migration is
// recorded exactly once.
func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testdb.NewEmpty(t).DB.DB

	const replicas = 5
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() { errs[i] = dbmigrate.Up(ctx, db) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "replica %d", i)
	}

	st, err := dbmigrate.Status(ctx, db)
	require.NoError(t, err)
	want := map[int64]int{0: 1}
	for _, s := range st {
		want[s.Version] = 1
	}
	got := map[int64]int{}
	rows, err := db.QueryContext(ctx, `SELECT version_id, COUNT(*) FROM `+dbmigrate.VersionTable+` GROUP BY version_id`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var v int64
		var n int
		require.NoError(t, rows.Scan(&v, &n))
		got[v] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, got, "version_id → rows in %s", dbmigrate.VersionTable)
}

// While another session holds the lock, Up waits and then fails with ErrLocked, naming the
// problem; once the lock is free, Up succeeds.
func TestUpWaitsForLock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := testdb.NewEmpty(t)
	db := d.DB.DB

	holder, err := db.Conn(ctx)
	require.NoError(t, err)
	defer holder.Close()
	locker := &dbmigrate.SessionLocker{Timeout: time.Second}
	require.NoError(t, locker.SessionLock(ctx, holder))

	var name string
	require.NoError(t, holder.QueryRowContext(ctx, `SELECT ?`, dbmigrate.LockNamePrefix+d.Name).Scan(&name))
	var usedBy sql.NullInt64
	require.NoError(t, holder.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, name).Scan(&usedBy))
	require.True(t, usedBy.Valid, "lock %q is per database", name)

	start := time.Now()
	err = dbmigrate.Up(ctx, db, dbmigrate.WithLockTimeout(time.Second))
	require.ErrorIs(t, err, dbmigrate.ErrLocked)
	require.ErrorContains(t, err, "another migration holds the lock")
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond, "Up waited for the lock")

	require.NoError(t, locker.SessionUnlock(ctx, holder))
	require.Error(t, locker.SessionUnlock(ctx, holder), "unlocking a lock not held")
	require.NoError(t, dbmigrate.Up(ctx, db, dbmigrate.WithLockTimeout(time.Second)))
}

func TestNilDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.ErrorContains(t, dbmigrate.Up(ctx, nil), "db is nil")
	_, err := dbmigrate.Pending(ctx, nil)
	require.ErrorContains(t, err, "db is nil")
}
