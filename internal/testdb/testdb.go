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
//  3. Neither: the test is skipped, or fails when CI=true, so that CI never passes by skipping.
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

// DefaultMaxOpenConns is the pool size of each test database unless [WithPool] says otherwise.
// It is larger than production's default so that concurrency tests ("50 concurrent claims") do not
// queue on the pool.
const DefaultMaxOpenConns = 64

// NamePrefix starts the name of every test database.
const NamePrefix = "idemguard_t_"

// setupTimeout bounds creating, migrating and dropping one test database.
const setupTimeout = 60 * time.Second

const noServerHelp = "no MySQL for tests: set " + EnvDSN + " to a DSN for a user that may CREATE and DROP DATABASE " +
	"(e.g. " + EnvDSN + "='root@tcp(127.0.0.1:3306)/test'), or make a Docker engine reachable for testcontainers " +
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
	switch {
	case err != nil:
		t.Fatalf("testdb: %v", err)
	case dsn == "" && os.Getenv("CI") == "true":
		t.Fatal("testdb: CI=true and " + noServerHelp)
	case dsn == "":
		t.Skip("testdb: " + noServerHelp)
	}
	return dsn
}

var (
	serverOnce sync.Once
	serverDSN  string
	serverErr  error
)

// findServer returns "" with a nil error when no server is available.
func findServer() (string, error) {
	if dsn := strings.TrimSpace(os.Getenv(EnvDSN)); dsn != "" {
		out, err := mysqlconn.WithDatabase(dsn, "")
		if err != nil {
			return "", fmt.Errorf("%s: %w", EnvDSN, err)
		}
		return out, nil
	}
	serverOnce.Do(func() {
		if !dockerAvailable() {
			return
		}
		dsn, err := startContainer()
		if err != nil {
			serverErr = err
			return
		}
		serverDSN, serverErr = mysqlconn.WithDatabase(dsn, "")
	})
	return serverDSN, serverErr
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
