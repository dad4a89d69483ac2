package mysqlstore

import (
	"fmt"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/testdb"
)

// A key's history is read through idx_idempotency_audit_key_at, a range of
// (tenant, scope, key_hash) per hash, never a scan of the trail. (The sort
// by at, event_id is a filesort of that key's own events: event_id is not in
// the index.)
func TestHistoryReadsTheKeyIndex(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := t.Context()
	_, err := d.DB.ExecContext(ctx, `INSERT INTO idempotency_audit (event_id, kind, at, tenant, scope, key_hash, attempt)
WITH RECURSIVE h (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM h WHERE n < 1000)
SELECT LPAD(HEX(n), 32, '0'), 'replay', UTC_TIMESTAMP(6) - INTERVAL n SECOND, CONCAT('t', n % 7), 's',
  LPAD(HEX(n % 100), 64, '0'), 1 FROM h`)
	require.NoError(t, err)
	_, err = d.DB.ExecContext(ctx, `ANALYZE TABLE idempotency_audit`)
	require.NoError(t, err)
	for _, n := range []int{1, 2, 3} {
		hashes := make([]string, n)
		for i := range hashes {
			hashes[i] = fmt.Sprintf("%064X", i+1)
		}
		query, args, err := sqlx.In(historySQL, "t1", "s", hashes, 1000)
		require.NoError(t, err)
		plans := testdb.Explain(t, d.DB, query, args...)
		require.Len(t, plans, 1)
		p := plans[0]
		t.Logf("%d hashes: %v", n, p)
		require.Equal(t, "idx_idempotency_audit_key_at", p["key"], "plan: %v", p)
		require.Contains(t, []string{"ref", "range"}, p["type"], "plan: %v", p)
	}
}
