// Package testdb gives each test its own MySQL database: created fresh, optionally migrated, and
// dropped when the test ends, so tests in all packages run in parallel without touching each
// other's rows.
//
// # Finding a server
//
// [ServerDSN] looks, in this order, for:
//
//  1. The environment variable IDEMGUARD_TEST_MYSQL_DSN: a DSN for a user allowed to CREATE and
//     DROP DATABASE, e.g. root@tcp(127.0.0.1:3306)/test. Its database name is ignored.
//  2. A reachable Docker engine: one mysql:8.4 container is started per test process (see
//     container.go) and shared by all tests in it.
//  3. The conventional development server, [LocalDSN] (root, no password, 127.0.0.1:3306), if it
//     answers within [LocalProbeTimeout].
//  4. None: the test is skipped, or fails when CI=true, so that CI never passes by skipping.
//
// A skipped test appends its name to the file named by IDEMGUARD_TEST_SKIP_LOG, if set: each
// package is its own test binary, and `go test` shows nothing of a passing package's skips
// without -v, so `make test` counts that file's lines into one closing line.
//
// Databases are named idemguard_t_<8 random hex digits>.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/idemguard/idemguard/internal/dbmigrate"
	"github.com/idemguard/idemguard/internal/mysqlconn"
)

// EnvDSN names the environment variable holding the test server's DSN.
const EnvDSN = "IDEMGUARD_TEST_MYSQL_DSN"

// EnvSkipLog names the environment variable holding the file that each test skipped for want of
// MySQL appends its name to (make test sets it and counts the lines).
const EnvSkipLog = "IDEMGUARD_TEST_SKIP_LOG"

// LocalDSN is the conventional development server tried when no DSN is set and no Docker engine
// answers.
const LocalDSN = "root@tcp(127.0.0.1:3306)/test"

// LocalProbeTimeout bounds trying LocalDSN: a machine without it must not slow every test down.
const LocalProbeTimeout = 2 * time.Second

// DefaultMaxOpenConns is the pool size of each test database unless [WithPool] says otherwise.
// It is larger than production's default so that concurrency tests ("50 concurrent claims") do not
// queue on the pool.
const DefaultMaxOpenConns = 64

// NamePrefix starts the name of every test database.
const NamePrefix = "idemguard_t_"

// setupTimeout bounds creating, migrating and dropping one test database.
const setupTimeout = 60 * time.Second

const noServerHelp = "no MySQL for tests: set " + EnvDSN + " to a DSN for a user that may CREATE and DROP DATABASE " +
	"(e.g. " + EnvDSN + "='root@tcp(127.0.0.1:3306)/test'), make a Docker engine reachable for testcontainers, " +
	"or run a MySQL/MariaDB that root may log in to without a password on 127.0.0.1:3306 " +
	"(or run .ci/run, which starts a local MariaDB)"

// Database is one fresh test database.
type Database struct {
	// Name is the database (schema) name, idemguard_t_<8 hex>.
	Name string
	// DSN points at this database and is normalized by mysqlconn.NormalizeDSN.
	DSN string
	// DB is a pool on DSN, opened with mysqlconn.Open. It is closed when the test ends.
	DB *sqlx.DB
}

// Option configures [New] and [NewEmpty].
type Option func(*config)

type config struct {
	pool mysqlconn.PoolConfig
}

// WithPool sizes the test database's pool. Zero fields take mysqlconn's defaults, except
// MaxOpenConns, which defaults to [DefaultMaxOpenConns].
func WithPool(p mysqlconn.PoolConfig) Option {
	return func(c *config) { c.pool = p }
}

// New creates a fresh database, applies every migration, and drops it when the test ends.
func New(t testing.TB, opts ...Option) *Database {
	t.Helper()
	d := NewEmpty(t, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := dbmigrate.Up(ctx, d.DB.DB); err != nil {
		t.Fatalf("testdb: migrate %s up: %v", d.Name, err)
	}
	return d
}

// NewEmpty creates a fresh database without any migration (for migration tests), and drops it
// when the test ends.
func NewEmpty(t testing.TB, opts ...Option) *Database {
	t.Helper()
	cfg := config{}
	for _, opt := range opts {
		opt(&cfg)
	}
	if cfg.pool.MaxOpenConns == 0 {
		cfg.pool.MaxOpenConns = DefaultMaxOpenConns
	}

	server := ServerDSN(t)
	name := NamePrefix + randomHex(t, 4)
	dsn, err := mysqlconn.WithDatabase(server, name)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}

	// Setup and cleanup use a context of their own: the test's context is already canceled
	// when t.Cleanup functions run.
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	if err := adminExec(ctx, server, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatalf("testdb: create database %s: %v", name, err)
	}
	// Registered before the pool's Close, so it runs after it (cleanups run last-in first-out).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if err := adminExec(ctx, server, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("testdb: drop database %s: %v", name, err)
		}
	})

	db, err := mysqlconn.Open(ctx, dsn, cfg.pool)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("testdb: close pool of %s: %v", name, err)
		}
	})
	return &Database{Name: name, DSN: dsn, DB: db}
}

// ServerDSN returns the DSN of the server tests run against (see the package documentation for
// the search order), normalized and without a database name. It skips the test, or fails it when
// CI=true, if there is no server.
func ServerDSN(t testing.TB) string {
	t.Helper()
	dsn, err := findServer()
	return decide(t, dsn, err, os.Getenv("CI") == "true", os.Getenv(EnvSkipLog))
}

// decide fails, skips (noting the skip in skipLog) or returns dsn.
func decide(t testing.TB, dsn string, err error, ci bool, skipLog string) string {
	t.Helper()
	switch {
	case err != nil:
		t.Fatalf("testdb: %v", err)
		return ""
	case dsn == "" && ci:
		t.Fatal("testdb: CI=true and " + noServerHelp)
		return ""
	case dsn == "":
		if skipLog != "" {
			if err := noteSkip(skipLog, t.Name()); err != nil {
				t.Logf("testdb: %s: %v", EnvSkipLog, err)
			}
		}
		t.Skip("testdb: " + noServerHelp)
		return ""
	}
	return dsn
}

// noteSkip appends one line to the skip log. One short O_APPEND write per line, so the test
// binaries of parallel packages never interleave within a line.
func noteSkip(path, name string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(strings.ReplaceAll(name, "\n", " ") + "\n"); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

var (
	serverOnce sync.Once
	serverDSN  string
	serverErr  error
)

// findServer returns "" with a nil error when no server is available. The Docker and local
// searches run once per test process.
func findServer() (string, error) {
	if dsn := strings.TrimSpace(os.Getenv(EnvDSN)); dsn != "" {
		out, err := mysqlconn.WithDatabase(dsn, "")
		if err != nil {
			return "", fmt.Errorf("%s: %w", EnvDSN, err)
		}
		return out, nil
	}
	serverOnce.Do(func() {
		dsn, err := locate(dockerAvailable, startContainer, probe)
		if err != nil || dsn == "" {
			serverErr = err
			return
		}
		serverDSN, serverErr = mysqlconn.WithDatabase(dsn, "")
	})
	return serverDSN, serverErr
}

// locate is steps 2 to 4 of the search: Docker, then LocalDSN, then nothing ("", nil).
func locate(docker func() bool, start func() (string, error), answers func(dsn string) bool) (string, error) {
	if docker() {
		return start()
	}
	if answers(LocalDSN) {
		return LocalDSN, nil
	}
	return "", nil
}

// probe reports whether a server answers dsn (logs in and pings) within LocalProbeTimeout.
func probe(dsn string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), LocalProbeTimeout)
	defer cancel()
	withTimeout, err := mysqlconn.NormalizeDSN(dsn + "?timeout=" + LocalProbeTimeout.String())
	if err != nil {
		return false
	}
	db, err := mysqlconn.Open(ctx, withTimeout, mysqlconn.PoolConfig{MaxOpenConns: 1})
	if err != nil {
		return false
	}
	_ = db.Close()
	return true
}

// adminExec runs one statement on a short-lived server-level connection. No pool outlives it, so
// goroutine leak checks (goleak) stay clean.
func adminExec(ctx context.Context, serverDSN, stmt string) error {
	db, err := mysqlconn.Open(ctx, serverDSN, mysqlconn.PoolConfig{MaxOpenConns: 1})
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, stmt)
	return err
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("testdb: random name: %v", err)
	}
	return hex.EncodeToString(b)
}
