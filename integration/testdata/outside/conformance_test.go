package main

// This file is copied into the outside module as conformance_test.go: a
// module that is not idemguard holds the two stores it ships to the
// conformance suite through nothing but their public packages.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/idemguard/idemguard/mysql"
	"github.com/idemguard/idemguard/store/memstore"
	"github.com/idemguard/idemguard/store/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Exercise(context.Background(), t, func(_ context.Context, t *testing.T) *storetest.Harness {
		s := memstore.New()
		return &storetest.Harness{
			Store: s,
			Age: func(t testing.TB, tenant, scope, keyHash string, d time.Duration) {
				if !s.Age(tenant, scope, keyHash, d) {
					t.Fatalf("Age: no row %s/%s/%s", tenant, scope, keyHash)
				}
			},
			Dump: func(testing.TB) string {
				var b strings.Builder
				for _, r := range s.Rows() {
					fmt.Fprintf(&b, "%s %s %s %d %s %s %d %s %s %d %s\n", r.Tenant, r.Scope, r.KeyHash, r.ID,
						r.Fingerprint, r.Status, r.Attempts, r.ClaimNonce, r.Response, r.ResponseCode, r.Events)
				}
				return b.String()
			},
			Break: func(testing.TB) { _ = s.Close() },
		}
	})
}

// TestMySQLStoreConformance gives every case a database of its own on the
// server OUTSIDE_SERVER_DSN names, migrated with mysql.Migrate.
func TestMySQLStoreConformance(t *testing.T) {
	server := os.Getenv("OUTSIDE_SERVER_DSN")
	if server == "" {
		t.Fatal("OUTSIDE_SERVER_DSN is not set")
	}
	storetest.Exercise(context.Background(), t, func(ctx context.Context, t *testing.T) *storetest.Harness {
		db := newDatabase(ctx, t, server)
		return &storetest.Harness{
			Store: mysql.NewStore(db),
			Age: func(t testing.TB, tenant, scope, keyHash string, d time.Duration) {
				us := d.Microseconds()
				res, err := db.ExecContext(context.Background(), `UPDATE idempotency_keys SET
  created_at = created_at - INTERVAL ? MICROSECOND, started_at = started_at - INTERVAL ? MICROSECOND,
  heartbeat_at = heartbeat_at - INTERVAL ? MICROSECOND, completed_at = completed_at - INTERVAL ? MICROSECOND,
  expires_at = expires_at - INTERVAL ? MICROSECOND
WHERE tenant = ? AND scope = ? AND key_hash = ?`, us, us, us, us, us, tenant, scope, keyHash)
				if err != nil {
					t.Fatalf("Age: %v", err)
				}
				if n, err := res.RowsAffected(); err != nil || n != 1 {
					t.Fatalf("Age: no row %s/%s/%s (%v)", tenant, scope, keyHash, err)
				}
			},
			Dump: func(t testing.TB) string {
				rows, err := db.QueryContext(context.Background(), `SELECT CONCAT_WS(' ', tenant, scope, key_hash, id,
  request_fingerprint, status, attempt_count, claim_nonce, COALESCE(response_json, 'NULL'),
  COALESCE(response_code, 'NULL'), created_at, started_at, COALESCE(heartbeat_at, 'NULL'),
  COALESCE(completed_at, 'NULL'), expires_at, COALESCE(response_events, 'NULL')) FROM idempotency_keys ORDER BY id`)
				if err != nil {
					t.Fatalf("Dump: %v", err)
				}
				defer rows.Close()
				var b strings.Builder
				for rows.Next() {
					var line string
					if err := rows.Scan(&line); err != nil {
						t.Fatalf("Dump: %v", err)
					}
					b.WriteString(line + "\n")
				}
				if err := rows.Err(); err != nil {
					t.Fatalf("Dump: %v", err)
				}
				return b.String()
			},
			Break: func(testing.TB) { _ = db.Close() },
		}
	})
}

// newDatabase creates a database on the server, opens it with mysql.Open,
// migrates it, and drops it when t ends.
func newDatabase(ctx context.Context, t *testing.T, server string) *sql.DB {
	t.Helper()
	cfg, err := gomysql.ParseDSN(server)
	if err != nil {
		t.Fatalf("OUTSIDE_SERVER_DSN: %v", err)
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "outside_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), "DROP DATABASE "+name) })
	cfg.DBName = name
	db, err := mysql.Open(ctx, cfg.FormatDSN(), mysql.PoolConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db
}
