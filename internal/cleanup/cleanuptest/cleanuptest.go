// Package cleanuptest seeds idempotency_keys with many rows quickly, for cleanup's tests and
// benchmarks. It is not used by the binary.
package cleanuptest

import (
	"context"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"
)

// Tenant and Scope are the identity of every seeded row.
const (
	Tenant = "seed"
	Scope  = "cleanup.seed"
)

// Rows says how many rows of each kind [Seed] inserts. Times are the database clock's.
type Rows struct {
	// Expired rows are completed (one in ten failed, the rest succeeded) and expired between 1s
	// and Expired seconds ago: cleanup deletes them.
	Expired int
	// Live rows are succeeded and expire in a day: cleanup keeps them.
	Live int
	// FreshStarted rows are started, expired an hour ago, and heartbeated just now: a live owner
	// holds them, so cleanup keeps them.
	FreshStarted int
	// StaleStarted rows are started, expired an hour ago, and silent for an hour: cleanup deletes
	// them.
	StaleStarted int
}

// Deletable is the number of rows cleanup should delete: Expired + StaleStarted.
func (r Rows) Deletable() int { return r.Expired + r.StaleStarted }

// Total is the number of rows Seed inserts.
func (r Rows) Total() int { return r.Expired + r.Live + r.FreshStarted + r.StaleStarted }

// response is a realistic stored envelope (about 200 bytes), so that deleting a row costs what it
// does in production.
const response = `{"ok":true,"stopReason":"completed","createdActionRequestIds":[101,102],"traceId":"trace-0123456789abcdef",` +
	`"needsHuman":false,"cached":false,"data":{"summary":"a short generated answer, as an operation would store it","score":0.87}}`

// Seed inserts rows into idempotency_keys with one INSERT ... SELECT per kind, over a generated
// sequence (portable to MySQL 8 and MariaDB: no SEQUENCE engine, no recursive CTE limits). Key
// hashes are SHA2(kind-n), so the kinds never collide; seeding twice into one table is a
// duplicate-key error. 100,000 rows take about a second or two on a laptop.
func Seed(ctx context.Context, db *sqlx.DB, r Rows) error {
	kinds := []struct {
		name string
		n    int
		// columns status, created_at, started_at, heartbeat_at, completed_at, expires_at, attempt_count
		// as SQL expressions of n (0-based) and now.
		status, created, started, heartbeat, completed, expires, attempts, body string
	}{
		{"expired", r.Expired,
			"IF(n % 10 = 0, 'failed', 'succeeded')",
			"now - INTERVAL 1 DAY - INTERVAL (n + 1) SECOND", "now - INTERVAL 1 DAY - INTERVAL (n + 1) SECOND",
			"NULL", "now - INTERVAL (n + 1) SECOND - INTERVAL 1 DAY", "now - INTERVAL (n + 1) SECOND",
			"1", "'" + response + "'"},
		{"live", r.Live, "'succeeded'",
			"now", "now", "NULL", "now", "now + INTERVAL 1 DAY", "1", "'" + response + "'"},
		{"fresh-started", r.FreshStarted, "'started'",
			"now - INTERVAL 2 HOUR", "now - INTERVAL 2 HOUR", "now", "NULL", "now - INTERVAL 1 HOUR", "1", "NULL"},
		{"stale-started", r.StaleStarted, "'started'",
			"now - INTERVAL 2 HOUR", "now - INTERVAL 2 HOUR", "now - INTERVAL 1 HOUR", "NULL", "now - INTERVAL 1 HOUR", "1", "NULL"},
	}
	for _, k := range kinds {
		if k.n < 0 {
			return fmt.Errorf("cleanuptest: %s rows must not be negative, got %d", k.name, k.n)
		}
		if k.n == 0 {
			continue
		}
		q := `INSERT INTO idempotency_keys
  (tenant, scope, key_hash, request_fingerprint, status, attempt_count, claim_nonce, response_json, response_code,
   created_at, started_at, heartbeat_at, completed_at, expires_at)
SELECT ?, ?, SHA2(CONCAT(?, '-', n), 256), SHA2(CONCAT('fp-', n), 256), ` + k.status + `, ` + k.attempts + `,
  LEFT(MD5(CONCAT(?, n)), 32), ` + k.body + `, IF(` + k.body + ` IS NULL, NULL, 200),
  ` + k.created + `, ` + k.started + `, ` + k.heartbeat + `, ` + k.completed + `, ` + k.expires + `
FROM (` + sequence(k.n) + `) AS seq CROSS JOIN (SELECT UTC_TIMESTAMP(6) AS now) AS clock
WHERE n < ?`
		if _, err := db.ExecContext(ctx, q, Tenant, Scope, k.name, k.name, k.n); err != nil {
			return fmt.Errorf("cleanuptest: seed %d %s rows: %w", k.n, k.name, err)
		}
	}
	return nil
}

// sequence returns a SELECT of the column n over 0 .. 10^d - 1, the smallest such range that
// holds count values, built from cross-joined digit tables.
func sequence(count int) string {
	digits := "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 " +
		"UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	var terms, tables []string
	scale := 1
	for i := 0; scale < count || i == 0; i++ {
		terms = append(terms, fmt.Sprintf("%d * d%d.d", scale, i))
		tables = append(tables, fmt.Sprintf("%s AS d%d", digits, i))
		scale *= 10
	}
	return "SELECT " + strings.Join(terms, " + ") + " AS n FROM " + strings.Join(tables, " CROSS JOIN ")
}

// Count returns the number of rows in idempotency_keys.
func Count(ctx context.Context, db *sqlx.DB) (int64, error) {
	var n int64
	err := db.GetContext(ctx, &n, `SELECT COUNT(*) FROM idempotency_keys`)
	return n, err
}
