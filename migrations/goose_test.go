package migrations_test

import (
	"context"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/migrations"
	"github.com/idemguard/idemguard/mysql"
)

// A team's own goose setup can apply FS: a plain provider, no idemguard
// code. mysql.Migrate then finds nothing to do, and the store works.
func TestOwnGooseAppliesFS(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testdb.NewEmpty(t).DB.DB
	p, err := goose.NewProvider(goose.DialectMySQL, db, migrations.FS)
	require.NoError(t, err)
	results, err := p.Up(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, results)

	require.NoError(t, mysql.Migrate(ctx, db), "mysql.Migrate after goose: nothing pending, no error")
	g, err := idemguard.New(idemguard.Config{Store: mysql.NewStore(db), Secret: []byte("0123456789abcdef0123456789abcdef")})
	require.NoError(t, err)
	defer g.Close(ctx)
	res, err := g.Do(ctx, idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: "k"},
		func(context.Context) (any, error) { return map[string]any{"ok": true}, nil })
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	res, err = g.Do(ctx, idemguard.Call{Tenant: "acme", Scope: "s", ClientKey: "k"},
		func(context.Context) (any, error) { return nil, nil })
	require.NoError(t, err)
	require.True(t, res.Cached)
}

// An audit row written with the old kind "key.claimed" reads "claimed" after
// the rename migration, and the old form again after it is rolled back.
func TestAuditKindClaimedIsRenamed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := testdb.NewEmpty(t).DB.DB
	p, err := goose.NewProvider(goose.DialectMySQL, db, migrations.FS)
	require.NoError(t, err)
	_, err = p.UpTo(ctx, 20)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO idempotency_audit (event_id, kind, at, tenant, scope, key_hash, attempt)
		VALUES (REPEAT('0', 32), 'key.claimed', UTC_TIMESTAMP(6), 'acme', 's', REPEAT('a', 64), 1)`)
	require.NoError(t, err)
	kind := func() string {
		var k string
		require.NoError(t, db.QueryRowContext(ctx, `SELECT kind FROM idempotency_audit`).Scan(&k))
		return k
	}
	_, err = p.UpTo(ctx, 21)
	require.NoError(t, err)
	require.Equal(t, "claimed", kind())
	_, err = p.DownTo(ctx, 20)
	require.NoError(t, err)
	require.Equal(t, "key.claimed", kind())
}
