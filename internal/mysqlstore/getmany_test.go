package mysqlstore

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/cleanup/cleanuptest"
	"github.com/idemguard/idemguard/internal/testdb"
)

// The read a won claim makes during a secret rotation (GetMany: the request's rows under every
// other configured secret) is one lookup of the unique key (tenant, scope, key_hash), a point per
// hash, never a scan, whatever the table holds.
func TestGetManyReadsTheUniqueKey(t *testing.T) {
	t.Parallel()
	d := seeded(t, cleanuptest.Rows{Live: 5_000, Expired: 5_000})
	ctx := t.Context()
	var tenant, scope string
	require.NoError(t, d.DB.QueryRowContext(ctx, `SELECT tenant, scope FROM idempotency_keys LIMIT 1`).Scan(&tenant, &scope))
	var existing []string
	require.NoError(t, d.DB.SelectContext(ctx, &existing,
		`SELECT key_hash FROM idempotency_keys WHERE tenant = ? AND scope = ? LIMIT 2`, tenant, scope))
	require.Len(t, existing, 2)
	require.Equal(t, getManyQuery(5), getManySQL+", ?, ?, ?, ?)")
	for _, n := range []int{1, 2, 3} {
		// Rows that exist, and one that does not (a secret with no row for the request).
		hashes := append(existing[:min(n, 2):min(n, 2)], fmt.Sprintf("%064x", n))[:n]
		args := []any{tenant, scope}
		for _, h := range hashes {
			args = append(args, h)
		}
		plans := testdb.Explain(t, d.DB, getManySQLs[n-1], args...)
		require.Len(t, plans, 1)
		p := plans[0]
		t.Logf("%d hashes: %v", n, p)
		require.Equal(t, "uk_idempotency_tenant_scope_key", p["key"], "plan: %v", p)
		require.Contains(t, []string{"const", "eq_ref", "ref", "range"}, p["type"], "plan: %v", p)
		require.False(t, strings.Contains(p["Extra"], "filesort"), "plan: %v", p)
	}
}
