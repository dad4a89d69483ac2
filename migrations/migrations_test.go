package migrations_test

import (
	"bufio"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
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

	type column struct {
		Name      string `db:"column_name"`
		DataType  string `db:"data_type"`
		Type      string `db:"column_type"`
		Precision *int   `db:"datetime_precision"`
		Nullable  string `db:"is_nullable"`
	}
	var cols []column
	require.NoError(t, db.SelectContext(ctx, &cols, `
		SELECT column_name, data_type, column_type, datetime_precision, is_nullable
		FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = 'idempotency_keys'
		ORDER BY ordinal_position`))
	byName := map[string]column{}
	for _, c := range cols {
		byName[c.Name] = c
		require.NotEqual(t, "timestamp", c.DataType, "column %s: TIMESTAMP is banned, use DATETIME(6)", c.Name)
	}

	times := map[string]string{
		"created_at": "NO", "started_at": "NO", "heartbeat_at": "YES", "completed_at": "YES", "expires_at": "NO",
	}
	for name, nullable := range times {
		c, ok := byName[name]
		require.True(t, ok, "column %s exists", name)
		require.Equal(t, "datetime", c.DataType, "column %s", name)
		require.NotNil(t, c.Precision, "column %s", name)
		require.Equal(t, 6, *c.Precision, "column %s: DATETIME(6)", name)
		require.Equal(t, nullable, c.Nullable, "column %s nullability", name)
	}
	// MySQL 8 says "bigint unsigned", MariaDB "bigint(20) unsigned".
	require.Equal(t, "bigint", byName["id"].DataType)
	require.True(t, strings.HasSuffix(byName["id"].Type, " unsigned"), "id column type %q", byName["id"].Type)
	for _, name := range []string{"tenant", "scope", "key_hash", "request_fingerprint", "status", "attempt_count",
		"claim_nonce", "response_json", "response_code"} {
		require.Contains(t, byName, name)
	}

	// Indexes, columns in order.
	type indexColumn struct {
		Index     string `db:"index_name"`
		Column    string `db:"column_name"`
		NonUnique int    `db:"non_unique"`
	}
	var idx []indexColumn
	require.NoError(t, db.SelectContext(ctx, &idx, `
		SELECT index_name, column_name, non_unique
		FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = 'idempotency_keys'
		ORDER BY index_name, seq_in_index`))
	indexes := map[string][]string{}
	unique := map[string]bool{}
	for _, ic := range idx {
		indexes[ic.Index] = append(indexes[ic.Index], ic.Column)
		unique[ic.Index] = ic.NonUnique == 0
	}
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

	type column struct {
		Name      string  `db:"column_name"`
		DataType  string  `db:"data_type"`
		Type      string  `db:"column_type"`
		Precision *int    `db:"datetime_precision"`
		Nullable  string  `db:"is_nullable"`
		Charset   *string `db:"character_set_name"`
		Collation *string `db:"collation_name"`
	}
	var cols []column
	require.NoError(t, db.SelectContext(ctx, &cols, `
		SELECT column_name, data_type, column_type, datetime_precision, is_nullable, character_set_name, collation_name
		FROM information_schema.columns
		WHERE table_schema = DATABASE() AND table_name = 'idempotency_audit'
		ORDER BY ordinal_position`))
	var names []string
	byName := map[string]column{}
	for _, c := range cols {
		names = append(names, c.Name)
		byName[c.Name] = c
	}
	require.Equal(t, []string{"id", "event_id", "kind", "at", "tenant", "scope", "key_hash", "attempt", "actor",
		"original_at", "stop_reason", "detail"}, names)
	for name, nullable := range map[string]string{"at": "NO", "original_at": "YES"} {
		c := byName[name]
		require.Equal(t, "datetime", c.DataType, "column %s: DATETIME(6), never TIMESTAMP", name)
		require.NotNil(t, c.Precision, "column %s", name)
		require.Equal(t, 6, *c.Precision, "column %s: DATETIME(6)", name)
		require.Equal(t, nullable, c.Nullable, "column %s nullability", name)
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

	type indexColumn struct {
		Index     string `db:"index_name"`
		Column    string `db:"column_name"`
		NonUnique int    `db:"non_unique"`
	}
	var idx []indexColumn
	require.NoError(t, db.SelectContext(ctx, &idx, `
		SELECT index_name, column_name, non_unique
		FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = 'idempotency_audit'
		ORDER BY index_name, seq_in_index`))
	indexes := map[string][]string{}
	unique := map[string]bool{}
	for _, ic := range idx {
		indexes[ic.Index] = append(indexes[ic.Index], ic.Column)
		unique[ic.Index] = ic.NonUnique == 0
	}
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

	type column struct {
		Name     string `db:"column_name"`
		Type     string `db:"column_type"`
		Nullable string `db:"is_nullable"`
	}
	cols := func(table string) map[string]column {
		var cs []column
		require.NoError(t, db.SelectContext(ctx, &cs, `SELECT column_name, column_type, is_nullable
			FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?`, table))
		out := map[string]column{}
		for _, c := range cs {
			out[c.Name] = c
		}
		return out
	}
	tally := cols("idempotency_audit_tally")
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

	var uk []string
	require.NoError(t, db.SelectContext(ctx, &uk, `SELECT column_name FROM information_schema.statistics
		WHERE table_schema = DATABASE() AND table_name = 'idempotency_audit_tally'
		  AND index_name = 'uk_idempotency_audit_tally' ORDER BY seq_in_index`))
	require.Equal(t, []string{"tenant", "scope", "key_hash", "kind", "attempt", "actor", "detail"}, uk)

	const insert = `INSERT INTO idempotency_audit_tally (tenant, scope, key_hash, kind, attempt, actor, event_id,
		first_at, last_at, n) VALUES ('acme', 's', REPEAT('a', 64), 'replay', 1, 'key:a', ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 1)`
	_, err := db.ExecContext(ctx, insert, strings.Repeat("0", 32))
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, insert, strings.Repeat("1", 32))
	requireMySQLError(t, err, 1062) // detail defaults to '': the same tally, not a second row

	keys := cols("idempotency_keys")
	require.Equal(t, column{Name: "claim_event_id", Type: "char(32)", Nullable: "YES"}, keys["claim_event_id"])
	require.Equal(t, column{Name: "claimed_by", Type: "varchar(128)", Nullable: "YES"}, keys["claimed_by"])
}
