package mysqlconn_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var validDSNs = []string{
	"root@tcp(127.0.0.1:3306)/test",
	"user:secret@tcp(db.internal:3306)/idemguard?parseTime=false&loc=Local&sql_mode=%27%27",
	"user:p@ss/w:rd@tcp(localhost)/idemguard?timeout=2s",
	"user:secret@unix(/var/run/mysqld/mysqld.sock)/idemguard?time_zone=%27Europe%2FParis%27",
	"/idemguard",
	"user:secret@tcp(h:1)/db?interpolateParams=false&clientFoundRows=true",
}

func TestNormalizeDSN(t *testing.T) {
	t.Parallel()
	for _, dsn := range validDSNs {
		t.Run(dsn, func(t *testing.T) {
			t.Parallel()
			out, err := mysqlconn.NormalizeDSN(dsn)
			require.NoError(t, err)

			cfg, err := mysql.ParseDSN(out)
			require.NoError(t, err)
			require.True(t, cfg.ParseTime)
			require.Equal(t, time.UTC, cfg.Loc)
			require.True(t, cfg.InterpolateParams)
			require.False(t, cfg.ClientFoundRows)
			require.Equal(t, "'+00:00'", cfg.Params["time_zone"])
			require.Equal(t, "'TRADITIONAL'", cfg.Params["sql_mode"])
			require.Contains(t, out, "time_zone=%27%2B00%3A00%27", "time_zone is URL-escaped in the DSN: a bare + would read back as a space")
			if strings.Contains(dsn, "timeout=2s") {
				require.Equal(t, 2*time.Second, cfg.Timeout, "an explicit timeout is kept")
			} else {
				require.Equal(t, mysqlconn.DefaultDialTimeout, cfg.Timeout)
			}

			orig, err := mysql.ParseDSN(dsn)
			require.NoError(t, err)
			require.Equal(t, orig.User, cfg.User)
			require.Equal(t, orig.Passwd, cfg.Passwd)
			require.Equal(t, orig.Addr, cfg.Addr)
			require.Equal(t, orig.DBName, cfg.DBName)

			again, err := mysqlconn.NormalizeDSN(out)
			require.NoError(t, err)
			require.Equal(t, out, again, "normalizing twice equals normalizing once")
		})
	}
}

func TestNormalizeDSNErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		dsn, want string
	}{
		{"", "DSN is empty"},
		{"   ", "DSN is empty"},
		{"user:hunter2@tcp(localhost:3306)", "missing the slash"},
		{"user:hunter2@tcp(localhost:3306/db", "network address not terminated"},
		{"mysql://user:hunter2@localhost:3306/db", "not a URL"},
		{"user:hunter2@tcp(h)/db?parseTime=maybe", "invalid bool value"},
		{"user:hunter2@tcp(h)/db?charset=gbk&collation=gbk_chinese_ci", "unsafe collations"},
	} {
		t.Run(tt.dsn, func(t *testing.T) {
			t.Parallel()
			_, err := mysqlconn.NormalizeDSN(tt.dsn)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "hunter2", "the password never appears in errors")
		})
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"root@tcp(127.0.0.1:3306)/test", "root@tcp(127.0.0.1:3306)/test"},
		{"user:secret@tcp(h:3306)/db?parseTime=true", "user:xxxxx@tcp(h:3306)/db?parseTime=true"},
		{"user:p@ss/w:rd@tcp(h)/db", "user:xxxxx@tcp(h)/db"},
		{"user:secret@tcp(h:3306)", "user:xxxxx@tcp(h:3306)"},
		{"user:@tcp(h)/db", "user:@tcp(h)/db"},
		{"", ""},
		// A URL (which the driver refuses) keeps everything but its password.
		{"mysql://app:hunter2@db.example:3306/idemguard?tls=true", "mysql://app:xxxxx@db.example:3306/idemguard?tls=true"},
		{"mysql://app:p@ss@db/idemguard", "mysql://app:xxxxx@db/idemguard"},
		{"mysql://app:pw/x@db/idemguard", "mysql://app:xxxxx@db/idemguard"}, // an unescaped '/' in the password
		{"mysql://app@db/idemguard", "mysql://app@db/idemguard"},
		{"user:a://b@tcp(h)/db", "user:xxxxx@tcp(h)/db"},
	} {
		require.Equal(t, tt.want, mysqlconn.Redact(tt.in), "Redact(%q)", tt.in)
	}
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	server := testdb.ServerDSN(t)

	db, err := mysqlconn.Open(ctx, server, mysqlconn.PoolConfig{})
	require.NoError(t, err)
	defer db.Close()
	require.Equal(t, mysqlconn.DefaultMaxOpenConns, db.Stats().MaxOpenConnections)

	var tz, mode string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT @@session.time_zone, @@session.sql_mode`).Scan(&tz, &mode))
	require.Equal(t, "+00:00", tz)
	require.Contains(t, mode, "STRICT_ALL_TABLES")

	// DATETIME(6) comes back as time.Time in UTC, with microseconds.
	var now time.Time
	require.NoError(t, db.QueryRowContext(ctx, `SELECT UTC_TIMESTAMP(6)`).Scan(&now))
	require.Equal(t, time.UTC, now.Location())
	require.WithinDuration(t, time.Now(), now, time.Minute)
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	server := testdb.ServerDSN(t)
	cfg, err := mysql.ParseDSN(server)
	require.NoError(t, err)

	// Wrong password: the error names the server, never the password.
	cfg.User = "idemguard_no_such_user"
	cfg.Passwd = "hunter2"
	_, err = mysqlconn.Open(ctx, cfg.FormatDSN(), mysqlconn.PoolConfig{})
	require.ErrorContains(t, err, "mysqlconn: ping")
	require.ErrorContains(t, err, "xxxxx")
	require.NotContains(t, err.Error(), "hunter2")

	// Nothing listening: fails within the dial timeout.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = mysqlconn.Open(ctx, "u:hunter2@tcp(127.0.0.1:1)/db", mysqlconn.PoolConfig{})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2")

	_, err = mysqlconn.Open(ctx, server, mysqlconn.PoolConfig{MaxOpenConns: -1})
	require.ErrorContains(t, err, "PoolConfig.MaxOpenConns")
}

func FuzzNormalizeDSN(f *testing.F) {
	for _, dsn := range validDSNs {
		f.Add(dsn)
	}
	f.Add("user:pa?ss/w@tcp(h)/db?x=1")
	f.Fuzz(func(t *testing.T, dsn string) {
		out, err := mysqlconn.NormalizeDSN(dsn)
		if err != nil {
			return
		}
		again, err := mysqlconn.NormalizeDSN(out)
		if err != nil {
			t.Fatalf("normalized DSN does not normalize again: %v", err)
		}
		if again != out {
			t.Fatalf("normalize is not stable:\n once: %q\ntwice: %q", out, again)
		}
	})
}
