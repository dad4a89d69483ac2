package faults

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/faulttest"
	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.IgnoreAnyFunction("github.com/go-sql-driver/mysql.(*mysqlConn).startWatcher.func1"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

var secret = []byte("faults-test-secret-0123456789abcdef-0123")

// bench is one database, reachable directly and through a fault proxy.
type bench struct {
	db    *testdb.Database
	proxy *faulttest.Proxy
	// viaProxy is a pool whose every connection goes through proxy.
	viaProxy *sqlx.DB
}

func newBench(t *testing.T) *bench {
	t.Helper()
	db := testdb.New(t)
	proxy, pool := proxiedPool(t, db.DSN)
	return &bench{db: db, proxy: proxy, viaProxy: pool}
}

// proxiedPool opens a pool to dsn's database whose every connection goes
// through a new fault proxy.
func proxiedPool(t *testing.T, dsn string) (*faulttest.Proxy, *sqlx.DB) {
	t.Helper()
	proxy, cfg := faulttest.ProxyDSN(t, dsn)
	cfg.Timeout = time.Second // dial, through a proxy that may be blackholed
	pool, err := mysqlconn.Open(context.Background(), cfg.FormatDSN(), mysqlconn.PoolConfig{MaxOpenConns: 24})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Close() })
	return proxy, pool
}

// doAsync runs g.Do in a goroutine; the result arrives on the channel. An
// error fails the test (t.Error, never require in a goroutine), and the
// result is still sent so the test goes on to its checks.
func doAsync(t *testing.T, g *idemguard.Guard, c idemguard.Call, op idemguard.Operation) <-chan idemguard.Result {
	done := make(chan idemguard.Result, 1)
	go func() {
		r, err := g.Do(context.Background(), c, op)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	return done
}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// guard returns a Guard over db; it is closed when the test ends.
func guard(t *testing.T, db *sqlx.DB, mutate ...func(*idemguard.Config)) *idemguard.Guard {
	t.Helper()
	cfg := idemguard.Config{Store: mysqlstore.New(db), Secret: secret,
		Logger: slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	for _, m := range mutate {
		m(&cfg)
	}
	g, err := idemguard.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, g.Close(ctx))
	})
	return g
}

func storeTimeout(d time.Duration) func(*idemguard.Config) {
	return func(c *idemguard.Config) { c.StoreTimeout = d }
}

func noCache(c *idemguard.Config) { c.ReplayCacheSize = -1 }

// rows counts the rows of idempotency_keys with the given status ("" for all).
func rows(t testing.TB, db *testdb.Database, status string) int {
	t.Helper()
	var n int
	q, args := `SELECT COUNT(*) FROM idempotency_keys`, []any{}
	if status != "" {
		q, args = q+` WHERE status = ?`, append(args, status)
	}
	require.NoError(t, db.DB.GetContext(context.Background(), &n, q, args...))
	return n
}

// pollUntil polls cond every few milliseconds until it holds or within passes.
func pollUntil(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lockWaits is how many statements on this test's database wait for a row
// lock right now. It reads SHOW ENGINE INNODB STATUS, not
// information_schema.innodb_trx: that table is a server-wide cache that is
// refreshed only after 100 ms without any reader, so tests polling it in
// parallel would read a stale snapshot for ever.
func lockWaits(t testing.TB, db *testdb.Database) int {
	t.Helper()
	var ids []string
	require.NoError(t, db.DB.SelectContext(context.Background(), &ids,
		`SELECT CAST(id AS CHAR) FROM information_schema.processlist WHERE db = DATABASE()`))
	ours := map[string]bool{}
	for _, id := range ids {
		ours[id] = true
	}
	var typ, name, status string
	require.NoError(t, db.DB.QueryRowContext(context.Background(), `SHOW ENGINE INNODB STATUS`).Scan(&typ, &name, &status))
	n := 0
	for _, block := range strings.Split(status, "---TRANSACTION ")[1:] {
		m := threadID.FindStringSubmatch(block)
		if m != nil && ours[m[1]] && strings.Contains(block, "LOCK WAIT") {
			n++
		}
	}
	return n
}

var threadID = regexp.MustCompile(`thread id (\d+)`)

// asFresh turns a replay's body back into the first answer's.
func asFresh(body []byte) []byte {
	return []byte(strings.Replace(string(body), `"cached":true`, `"cached":false`, 1))
}
