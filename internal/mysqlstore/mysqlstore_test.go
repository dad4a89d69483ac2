package mysqlstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/cleanup"
	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql's connection opener and the driver's connection-check goroutines.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreAnyFunction("github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher.func1"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// TestConformance runs the whole store suite on real MySQL: every case gets
// its own freshly migrated database, and concurrent cases use separate pooled
// connections with committed rows.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Exercise(context.Background(), t, func(_ context.Context, t *testing.T) *storetest.Harness {
		db := testdb.New(t)
		return &storetest.Harness{
			Store: mysqlstore.New(db.DB),
			Age: func(t testing.TB, tenant, scope, keyHash string, d time.Duration) {
				res, err := db.DB.ExecContext(context.Background(), `UPDATE idempotency_keys SET
  created_at = created_at - INTERVAL ? MICROSECOND, started_at = started_at - INTERVAL ? MICROSECOND,
  heartbeat_at = heartbeat_at - INTERVAL ? MICROSECOND, completed_at = completed_at - INTERVAL ? MICROSECOND,
  expires_at = expires_at - INTERVAL ? MICROSECOND
WHERE tenant = ? AND scope = ? AND key_hash = ?`, d.Microseconds(), d.Microseconds(), d.Microseconds(),
					d.Microseconds(), d.Microseconds(), tenant, scope, keyHash)
				require.NoError(t, err)
				n, err := res.RowsAffected()
				require.NoError(t, err)
				require.EqualValues(t, 1, n, "Age: no row %s/%s/%s", tenant, scope, keyHash)
			},
			Dump:  func(t testing.TB) string { return dump(t, db) },
			Break: func(testing.TB) { _ = db.DB.Close() },
			Sweep: func(t testing.TB, fallback time.Duration) int64 {
				sum, err := cleanup.Run(context.Background(), db.DB, cleanup.Options{StaleAfter: fallback, Pause: -1,
					StatsRetention: -1, AuditRetention: -1, Logger: slog.New(slog.DiscardHandler)})
				require.NoError(t, err)
				require.Equal(t, cleanup.StopDone, sum.Stopped)
				return sum.Deleted
			},
		}
	})
}

func dump(t testing.TB, db *testdb.Database) string {
	var lines []string
	err := db.DB.SelectContext(context.Background(), &lines, `SELECT CONCAT_WS(' ', tenant, scope, key_hash, id,
  request_fingerprint, status, attempt_count, claim_nonce, COALESCE(response_json, 'NULL'),
  COALESCE(response_code, 'NULL'), created_at, started_at, COALESCE(heartbeat_at, 'NULL'),
  COALESCE(completed_at, 'NULL'), expires_at, COALESCE(response_events, 'NULL')) FROM idempotency_keys ORDER BY id`)
	require.NoError(t, err)
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// An unreachable database: the guard fails closed and never runs the operation.
func TestUnreachableDatabaseFailsClosed(t *testing.T) {
	t.Parallel()
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr, cfg.DBName = "root", "tcp", "127.0.0.1:1", "nowhere"
	cfg.Timeout = 500 * time.Millisecond
	dsn, err := mysqlconn.NormalizeDSN(cfg.FormatDSN())
	require.NoError(t, err)
	_, err = mysqlconn.Open(context.Background(), dsn, mysqlconn.PoolConfig{})
	require.Error(t, err, "Open pings, so an unreachable server is reported at start")

	// A pool whose server went away after start.
	db := testdb.New(t)
	st := mysqlstore.New(db.DB)
	g, err := idemguard.New(idemguard.Config{Store: st, Secret: storetest.Secret, StoreTimeout: 2 * time.Second})
	require.NoError(t, err)
	defer g.Close(context.Background())
	_, err = db.DB.ExecContext(context.Background(), "DROP TABLE idempotency_keys")
	require.NoError(t, err)
	ran := false
	_, err = g.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1},
		func(context.Context) (any, error) { ran = true; return map[string]any{"ok": true}, nil })
	require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
	require.False(t, ran)
}

func TestDuplicateIsMatchedByNumber(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	s := mysqlstore.New(db.DB)
	p := store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: strings.Repeat("a", 64),
		Fingerprint: strings.Repeat("b", 64), Nonce: "n1", TTL: time.Hour}
	_, err := s.Claim(context.Background(), p)
	require.NoError(t, err)
	_, err = s.Claim(context.Background(), p)
	require.ErrorIs(t, err, store.ErrDuplicate)

	// Strict mode: a value that does not fit is an error, never a truncated row.
	p.Tenant = strings.Repeat("t", 65)
	_, err = s.Claim(context.Background(), p)
	require.Error(t, err)
	require.False(t, errors.Is(err, store.ErrDuplicate))
	var me *mysql.MySQLError
	require.ErrorAs(t, err, &me)
	require.EqualValues(t, 1406, me.Number) // ER_DATA_TOO_LONG
}

// Times are read back in UTC and compared on the database's clock even when
// the server's own time zone is not UTC.
func TestTimesAreUTCDatabaseClock(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	s := mysqlstore.New(db.DB)
	_, err := s.Claim(context.Background(), store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: strings.Repeat("c", 64),
		Fingerprint: strings.Repeat("d", 64), Nonce: "n1", TTL: 90 * time.Second})
	require.NoError(t, err)
	r, err := s.Get(context.Background(), "acme", "s", strings.Repeat("c", 64))
	require.NoError(t, err)
	require.Equal(t, time.UTC, r.CreatedAt.Location())
	require.Equal(t, 90*time.Second, r.ExpiresAt.Sub(r.CreatedAt))
	require.WithinDuration(t, time.Now().UTC(), r.Now, time.Minute, "the database clock is far from this host's")
	require.NotZero(t, r.CreatedAt.Nanosecond()%int(time.Second), "DATETIME(6) keeps microseconds")
}

// An engine that reports 0 for LAST_INSERT_ID(expr) in the OK packet (TiDB
// may): Complete reads completed_at back instead of answering the epoch.
func TestCompleteReadsCompletedAtBackWithoutTheOKPacket(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	s := mysqlstore.New(db.DB)
	mysqlstore.ZeroOKPacketTime(s)
	ctx := context.Background()
	nonce := strings.Repeat("ab", 16)
	id, err := s.Claim(ctx, store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: strings.Repeat("c", 64),
		Fingerprint: strings.Repeat("d", 64), Nonce: nonce, TTL: time.Hour, Lease: time.Minute})
	require.NoError(t, err)
	ok, at, err := s.Complete(ctx, store.CompleteParams{ID: id, Nonce: nonce, Status: store.RowSucceeded,
		Response: []byte(`{"ok":true}`), ResponseCode: 200, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
	rec, err := s.Get(ctx, "acme", "s", strings.Repeat("c", 64))
	require.NoError(t, err)
	require.False(t, rec.CompletedAt.IsZero())
	require.True(t, rec.CompletedAt.Equal(at), "completed_at %v, Complete answered %v", rec.CompletedAt, at)
}

// On an engine that reports 0 for LAST_INSERT_ID(expr), Renew reads the
// cancel flag back: a cancel is still seen, and no cancel is invented.
func TestRenewReadsTheCancelFlagBackWithoutTheOKPacket(t *testing.T) {
	t.Parallel()
	for _, zero := range []bool{false, true} {
		db := testdb.New(t)
		s := mysqlstore.New(db.DB)
		if zero {
			mysqlstore.ZeroOKPacketTime(s)
		}
		ctx := context.Background()
		nonce := strings.Repeat("ef", 16)
		id, err := s.Claim(ctx, store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: strings.Repeat("e", 64),
			Fingerprint: strings.Repeat("d", 64), Nonce: nonce, TTL: time.Hour, Lease: time.Minute})
		require.NoError(t, err)
		r, err := s.Renew(ctx, store.RenewParams{ID: id, Nonce: nonce, Extend: time.Hour})
		require.NoError(t, err)
		require.Equal(t, store.RenewResult{Renewed: true}, r, "zero OK packet %v", zero)
		ok, err := s.RequestCancel(ctx, store.CancelParams{ID: id, Nonce: nonce})
		require.NoError(t, err)
		require.True(t, ok)
		r, err = s.Renew(ctx, store.RenewParams{ID: id, Nonce: nonce, Extend: time.Hour})
		require.NoError(t, err)
		require.Equal(t, store.RenewResult{Renewed: true, CancelRequested: true}, r, "zero OK packet %v", zero)
	}
}
