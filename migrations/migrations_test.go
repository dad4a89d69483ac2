package migrations_test

import (
	"bufio"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/migrations"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// MySQL commits DDL implicitly: a file with two statements that fails halfway can be neither
// rolled back nor re-run. Each file holds one statement per direction.
func TestOneStatementPerDirection(t *testing.T) {
	t.Parallel()
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, name := range files {
		body, err := fs.ReadFile(migrations.FS, name)
		require.NoError(t, err)
		counts := map[string]int{}
		section := ""
		sc := bufio.NewScanner(strings.NewReader(string(body)))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			switch {
			case strings.HasPrefix(line, "-- +goose Up"):
				section = "up"
			case strings.HasPrefix(line, "-- +goose Down"):
				section = "down"
			case strings.HasPrefix(line, "--"), line == "":
			case strings.HasSuffix(line, ";"):
				require.NotEmpty(t, section, "%s: statement before -- +goose Up", name)
				counts[section]++
			}
		}
		require.NoError(t, sc.Err())
		require.Equal(t, map[string]int{"up": 1, "down": 1}, counts, "%s: statements per direction", name)
	}
}

func TestSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testdb.New(t).DB

	_, byName := columnsOf(t, db, "idempotency_keys")
	for _, c := range byName {
		require.NotEqual(t, "timestamp", c.DataType, "column %s: TIMESTAMP is banned, use DATETIME(6)", c.Name)
	}

	times := map[string]string{
		"created_at": "NO", "started_at": "NO", "heartbeat_at": "YES", "completed_at": "YES", "expires_at": "NO",
	}
	for name, nullable := range times {
		require.Contains(t, byName, name)
		requireDatetime6(t, byName[name], nullable)
	}
	// MySQL 8 says "bigint unsigned", MariaDB "bigint(20) unsigned".
	require.Equal(t, "bigint", byName["id"].DataType)
	require.True(t, strings.HasSuffix(byName["id"].Type, " unsigned"), "id column type %q", byName["id"].Type)
	for _, name := range []string{"tenant", "scope", "key_hash", "request_fingerprint", "status", "attempt_count",
		"claim_nonce", "response_json", "response_code"} {
		require.Contains(t, byName, name)
	}

	// Indexes, columns in order.
	indexes, unique := indexesOf(t, db, "idempotency_keys")
	require.Equal(t, []string{"tenant", "scope", "key_hash"}, indexes["uk_idempotency_tenant_scope_key"])
	require.True(t, unique["uk_idempotency_tenant_scope_key"])
	require.Equal(t, []string{"expires_at"}, indexes["idx_idempotency_expires_at"])
	require.Equal(t, []string{"status", "heartbeat_at"}, indexes["idx_idempotency_status_heartbeat"])
	require.Equal(t, []string{"id"}, indexes["PRIMARY"])

	const insert = `INSERT INTO idempotency_keys
		(tenant, scope, key_hash, request_fingerprint, status, claim_nonce, created_at, started_at, heartbeat_at, expires_at)
		VALUES (?, 'demo', ?, ?, 'started', 'nonce', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6),
		        UTC_TIMESTAMP(6) + INTERVAL 1 DAY)`
	hash := strings.Repeat("a", 64)

	// Binary collation: tenants differing only in case are different tenants.
	_, err := db.ExecContext(ctx, insert, "Acme", hash, hash)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, insert, "acme", hash, hash)
	require.NoError(t, err, "Acme and acme must not collide")

	// The unique key holds within a tenant: duplicate key 1062.
	_, err = db.ExecContext(ctx, insert, "acme", hash, hash)
	requireMySQLError(t, err, 1062)

	// Strict mode: a 65-character tenant is an error, never a silent truncation.
	_, err = db.ExecContext(ctx, insert, strings.Repeat("t", 65), hash, hash)
	requireMySQLError(t, err, 1406)

	var n int
	require.NoError(t, db.GetContext(ctx, &n, `SELECT COUNT(*) FROM idempotency_keys`))
	require.Equal(t, 2, n)

	// attempt_count defaults to 1.
	var attempts int
	require.NoError(t, db.GetContext(ctx, &attempts, `SELECT attempt_count FROM idempotency_keys WHERE tenant = 'Acme'`))
	require.Equal(t, 1, attempts)
}

// column is one column of a table, as information_schema describes it.
type column struct {
	Name      string  `db:"column_name"`
	DataType  string  `db:"data_type"`
	Type      string  `db:"column_type"`
	Precision *int    `db:"datetime_precision"`
	Nullable  string  `db:"is_nullable"`
	Charset   *string `db:"character_set_name"`
	Collation *string `db:"collation_name"`
}

// columnsOf reads table's columns: their names in order, and each by name.
func columnsOf(t *testing.T, db *sqlx.DB, table string) ([]string, map[string]column) {
	t.Helper()
	var cols []column
	require.NoError(t, db.SelectContext(t.Context(), &cols, `
		SELECT column_name, data_type, column_type, datetime_precision, is_nullable, character_set_name, collation_name
		FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = ?
		ORDER BY ordinal_position`, table))
	var names []string
	byName := map[string]column{}
	for _, c := range cols {
		names = append(names, c.Name)
		byName[c.Name] = c
	}
	return names, byName
}

// indexesOf reads table's indexes: each one's columns in order, and
// whether it is unique.
func indexesOf(t *testing.T, db *sqlx.DB, table string) (map[string][]string, map[string]bool) {
	t.Helper()
	var idx []struct {
		Index     string `db:"index_name"`
		Column    string `db:"column_name"`
		NonUnique int    `db:"non_unique"`
	}
	require.NoError(t, db.SelectContext(t.Context(), &idx, `
		SELECT index_name, column_name, non_unique
		FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = ?
		ORDER BY index_name, seq_in_index`, table))
	indexes := map[string][]string{}
	unique := map[string]bool{}
	for _, ic := range idx {
		indexes[ic.Index] = append(indexes[ic.Index], ic.Column)
		unique[ic.Index] = ic.NonUnique == 0
	}
	return indexes, unique
}

// requireDatetime6 requires c to be a DATETIME(6), never a TIMESTAMP, of
// that nullability.
func requireDatetime6(t *testing.T, c column, nullable string) {
	t.Helper()
	require.Equal(t, "datetime", c.DataType, "column %s: DATETIME(6), never TIMESTAMP", c.Name)
	require.NotNil(t, c.Precision, "column %s", c.Name)
	require.Equal(t, 6, *c.Precision, "column %s: DATETIME(6)", c.Name)
	require.Equal(t, nullable, c.Nullable, "column %s nullability", c.Name)
}

func requireMySQLError(t *testing.T, err error, number uint16) {
	t.Helper()
	var myErr *mysql.MySQLError
	require.True(t, errors.As(err, &myErr), "want MySQL error %d, got %v", number, err)
	require.Equal(t, number, myErr.Number, "MySQL error: %v", myErr)
}

// idempotency_audit: the columns' types and nullability, its indexes, a unique event id, and
// byte-exact identifiers.
func TestAuditSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testdb.New(t).DB

	names, byName := columnsOf(t, db, "idempotency_audit")
	require.Equal(t, []string{"id", "event_id", "kind", "at", "tenant", "scope", "key_hash", "attempt", "actor",
		"original_at", "stop_reason", "detail"}, names)
	for name, nullable := range map[string]string{"at": "NO", "original_at": "YES"} {
		requireDatetime6(t, byName[name], nullable)
	}
	for _, name := range []string{"event_id", "kind", "tenant", "scope", "key_hash", "stop_reason", "detail"} {
		c := byName[name]
		require.NotNil(t, c.Collation, "column %s", name)
		require.Equal(t, "ascii_bin", *c.Collation, "column %s", name)
	}
	require.Equal(t, "utf8mb4_bin", *byName["actor"].Collation)
	require.Equal(t, "NO", byName["actor"].Nullable)
	require.Equal(t, "char(32)", byName["event_id"].Type)
	require.Equal(t, "char(64)", byName["key_hash"].Type, "the full hash, not a prefix")
	for _, name := range []string{"id", "attempt"} {
		require.True(t, strings.HasSuffix(byName[name].Type, " unsigned"), "column %s type %q", name, byName[name].Type)
	}
	require.Equal(t, "bigint", byName["id"].DataType)
	for _, name := range []string{"stop_reason", "detail"} {
		require.Equal(t, "YES", byName[name].Nullable, "column %s", name)
	}

	indexes, unique := indexesOf(t, db, "idempotency_audit")
	require.Equal(t, map[string][]string{
		"PRIMARY":                       {"id"},
		"uk_idempotency_audit_event_id": {"event_id"},
		"idx_idempotency_audit_key_at":  {"tenant", "scope", "key_hash", "at"},
		"idx_idempotency_audit_at":      {"at"},
	}, indexes)
	require.True(t, unique["uk_idempotency_audit_event_id"])
	require.False(t, unique["idx_idempotency_audit_key_at"])

	const insert = `INSERT INTO idempotency_audit (event_id, kind, at, tenant, scope, key_hash, attempt)
		VALUES (?, 'key.claimed', UTC_TIMESTAMP(6), ?, 'demo', ?, 1)`
	id, hash := strings.Repeat("0", 32), strings.Repeat("a", 64)
	_, err := db.ExecContext(ctx, insert, id, "acme", hash)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, insert, id, "Acme", hash)
	requireMySQLError(t, err, 1062) // one event id, one row
	_, err = db.ExecContext(ctx, insert, strings.Repeat("1", 32), "Acme", hash)
	require.NoError(t, err, "Acme and acme are two tenants")
	_, err = db.ExecContext(ctx, insert, strings.Repeat("2", 33), "acme", hash)
	requireMySQLError(t, err, 1406) // strict: never a truncated id
	var actor string
	require.NoError(t, db.GetContext(ctx, &actor, `SELECT actor FROM idempotency_audit WHERE tenant = 'acme'`))
	require.Empty(t, actor, "actor defaults to ''")
}

// idempotency_audit_tally: one row per key, kind, attempt, actor and detail (the unique key,
// every column NOT NULL so that it matches), DATETIME(6) times, a BIGINT count; and the claim
// event columns a key's row carries, NULL when the claim had none.
func TestAuditTallySchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testdb.New(t).DB

	_, tally := columnsOf(t, db, "idempotency_audit_tally")
	for _, name := range []string{"tenant", "scope", "key_hash", "kind", "attempt", "actor", "detail", "event_id",
		"first_at", "last_at", "n"} {
		require.Equal(t, "NO", tally[name].Nullable, "column %s", name)
	}
	require.Equal(t, "YES", tally["original_at"].Nullable)
	for _, name := range []string{"first_at", "last_at", "original_at"} {
		require.Equal(t, "datetime(6)", tally[name].Type, "column %s", name)
	}
	require.True(t, strings.HasPrefix(tally["n"].Type, "bigint") && strings.HasSuffix(tally["n"].Type, " unsigned"),
		"n is %q: a count that never wraps", tally["n"].Type)

	indexes, unique := indexesOf(t, db, "idempotency_audit_tally")
	require.Equal(t, []string{"tenant", "scope", "key_hash", "kind", "attempt", "actor", "detail"},
		indexes["uk_idempotency_audit_tally"])
	require.True(t, unique["uk_idempotency_audit_tally"])

	const insert = `INSERT INTO idempotency_audit_tally (tenant, scope, key_hash, kind, attempt, actor, event_id,
		first_at, last_at, n) VALUES ('acme', 's', REPEAT('a', 64), 'replay', 1, 'key:a', ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 1)`
	_, err := db.ExecContext(ctx, insert, strings.Repeat("0", 32))
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, insert, strings.Repeat("1", 32))
	requireMySQLError(t, err, 1062) // detail defaults to '': the same tally, not a second row

	_, keys := columnsOf(t, db, "idempotency_keys")
	for name, typ := range map[string]string{"claim_event_id": "char(32)", "claimed_by": "varchar(128)"} {
		require.Equal(t, typ, keys[name].Type, "column %s", name)
		require.Equal(t, "YES", keys[name].Nullable, "column %s", name)
	}
}
