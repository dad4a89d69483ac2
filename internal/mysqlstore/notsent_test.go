package mysqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/faulttest"
	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/store"
)

// notSentBench is a migrated database reached through a fault proxy by a
// pool of one connection (so which connection a statement uses is known).
type notSentBench struct {
	db    *testdb.Database
	proxy *faulttest.Proxy
	dsn   string // through the proxy, normalized
	st    *mysqlstore.Store
}

func newNotSentBench(t *testing.T) *notSentBench {
	t.Helper()
	db := testdb.New(t)
	proxy, cfg := faulttest.ProxyDSN(t, db.DSN)
	dsn, err := mysqlconn.NormalizeDSN(cfg.FormatDSN())
	require.NoError(t, err)
	pool, err := mysqlconn.Open(context.Background(), dsn, mysqlconn.PoolConfig{MaxOpenConns: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Close() })
	return &notSentBench{db: db, proxy: proxy, dsn: dsn, st: mysqlstore.New(pool)}
}

func claimParams(key string) store.ClaimParams {
	return store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: key, Fingerprint: "f", Nonce: "nonce-" + key,
		TTL: time.Hour, Lease: time.Minute}
}

func rowCount(t *testing.T, db *testdb.Database, key string) int {
	t.Helper()
	var n int
	require.NoError(t, db.DB.GetContext(context.Background(), &n, `SELECT COUNT(*) FROM idempotency_keys WHERE key_hash = ?`, key))
	return n
}

// The classifier, on the driver's real errors: store.ErrNotSent only where
// the statement provably never reached the server, an unknown outcome
// wherever it may have (a dial error must never stand for a write that
// could have gone out).
func TestNotSentOnlyWhenNothingWasSent(t *testing.T) {
	t.Parallel()
	b := newNotSentBench(t)
	ctx := context.Background()

	// A statement cut after it reached the server: it applied, and its
	// error is an unknown outcome, never "not sent".
	b.proxy.CutAfter("INSERT INTO idempotency_keys", 100*time.Millisecond) // the reply is held, then cut
	_, err := b.st.Claim(ctx, claimParams("cut"))
	t.Logf("cut mid-statement: %v", err)
	require.ErrorIs(t, err, store.ErrOutcomeUnknown)
	require.ErrorIs(t, err, mysql.ErrInvalidConn)
	require.NotErrorIs(t, err, store.ErrNotSent)
	require.Eventually(t, func() bool { return rowCount(t, b.db, "cut") == 1 }, 10*time.Second, 5*time.Millisecond,
		"the cut statement ran")

	// A statement sent on a live connection whose reply does not come in
	// time: the caller's deadline ends it, and it may still apply.
	_, err = b.st.Get(ctx, "acme", "s", "cut") // the pool's one connection is open again
	require.NoError(t, err)
	b.proxy.SetBlackhole(true)
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = b.st.Claim(tctx, claimParams("late"))
	cancel()
	b.proxy.SetBlackhole(false)
	t.Logf("no reply in time: %v", err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, store.ErrNotSent)

	// The database refuses connections: the pool could not hand out one,
	// nothing was sent.
	b.proxy.Refuse()
	_, err = b.st.Claim(ctx, claimParams("refused"))
	t.Logf("refused: %v", err)
	require.ErrorIs(t, err, store.ErrNotSent)
	require.NotErrorIs(t, err, store.ErrOutcomeUnknown)
	var oe *net.OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "dial", oe.Op)
	// Known down now: the next calls fail without dialing.
	for _, call := range []func() error{
		func() error { _, err := b.st.Claim(ctx, claimParams("refused")); return err },
		func() error { _, err := b.st.Get(ctx, "acme", "s", "refused"); return err },
		func() error {
			_, err := b.st.Reclaim(ctx, store.ReclaimParams{Kind: store.ReclaimStale, ID: 1})
			return err
		},
		func() error { return b.st.Ping(ctx) },
	} {
		err := call()
		var ce *mysqlconn.ConnectError
		require.ErrorAs(t, err, &ce)
		require.True(t, ce.Down, "%v", err)
	}

	// Back: within a second the pool connects again, by the background
	// probe alone.
	require.NoError(t, b.proxy.Accept())
	require.Eventually(t, func() bool { return b.st.Ping(ctx) == nil }, time.Second, 5*time.Millisecond)
	require.Zero(t, rowCount(t, b.db, "refused"), "a claim that was never sent is not there")

	// A pool opened without mysqlconn (an application's own sql.Open) has
	// no breaker: its dial error itself proves that nothing was sent.
	raw, err := sql.Open("mysql", b.dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close() })
	b.proxy.Refuse()
	_, err = mysqlstore.New(sqlx.NewDb(raw, "mysql")).Claim(ctx, claimParams("raw"))
	t.Logf("refused, plain pool: %v", err)
	require.ErrorIs(t, err, store.ErrNotSent)
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "dial", oe.Op)
	require.NoError(t, b.proxy.Accept())
}

// driver.ErrBadConn, as the driver returns it for a connection that closed
// before the statement: inside an audited write's transaction (the row
// statement ran, the connection died, the event's INSERT was never sent)
// nothing can commit, and the write is "not sent": the row is unchanged.
// A COMMIT is never classified so (commitError), whatever its error.
func TestBadConnInATransactionIsNotSent(t *testing.T) {
	t.Parallel()
	b := newNotSentBench(t)
	ctx := context.Background()
	mysqlstore.OnAuditTx(b.st, func(ctx context.Context, stage string, tx *sqlx.Tx) {
		if stage != "row" {
			return
		}
		// A statement canceled by its deadline: the driver closes the
		// connection under the transaction.
		sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err := tx.ExecContext(sctx, `SELECT SLEEP(0.5)`)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
	// A claim is one statement (its event rides on the row); the release of
	// the claim is an audited transaction (it deletes the row and writes its
	// event).
	p := claimParams("badconn")
	id, err := b.st.Claim(ctx, p)
	require.NoError(t, err)
	_, err = b.st.Release(ctx, store.ReleaseParams{ID: id, Nonce: p.Nonce, Audit: &store.AuditEvent{ID: newID(),
		Kind: store.AuditReleased, At: time.Now(), Tenant: "acme", Scope: "s", KeyHash: "badconn", Attempt: 1}})
	t.Logf("closed under the transaction: %v", err)
	require.ErrorIs(t, err, driver.ErrBadConn)
	require.ErrorIs(t, err, store.ErrNotSent)
	require.NotErrorIs(t, err, store.ErrOutcomeUnknown)
	mysqlstore.OnAuditTx(b.st, nil)
	require.Never(t, func() bool { return rowCount(t, b.db, "badconn") == 0 }, 200*time.Millisecond, 10*time.Millisecond,
		"the transaction never commits: the row stays")
	require.Empty(t, auditIDs(t, b.db.DB))

	// The same error from a COMMIT stays unknown.
	require.ErrorIs(t, mysqlstore.CommitError(driver.ErrBadConn), store.ErrOutcomeUnknown)
	require.False(t, errors.Is(mysqlstore.CommitError(driver.ErrBadConn), store.ErrNotSent))
}
