package mysqlstore

import (
	"fmt"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/testdb"
)

// A key's history is read from each of its three places through an index,
// a range of (tenant, scope, key_hash) per hash, never a scan of the
// trail: idx_idempotency_audit_key_at (the durable events),
// uk_idempotency_audit_tally (the tallies) and the keys' unique key (the
// claim a row carries). (The sort by at, event_id is a filesort of that
// key's own events.)
func TestHistoryReadsTheKeyIndex(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	ctx := t.Context()
	_, err := d.DB.ExecContext(ctx, `INSERT INTO idempotency_audit (event_id, kind, at, tenant, scope, key_hash, attempt)
WITH RECURSIVE h (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM h WHERE n < 1000)
SELECT LPAD(HEX(n), 32, '0'), 'replay', UTC_TIMESTAMP(6) - INTERVAL n SECOND, CONCAT('t', n % 7), 's',
  LPAD(HEX(n % 100), 64, '0'), 1 FROM h`)
	require.NoError(t, err)
	_, err = d.DB.ExecContext(ctx, `INSERT INTO idempotency_audit_tally
  (tenant, scope, key_hash, kind, attempt, actor, detail, event_id, first_at, last_at, n)
WITH RECURSIVE h (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM h WHERE n < 1000)
SELECT CONCAT('t', n % 7), 's', LPAD(HEX(n % 100), 64, '0'), 'replay', 1, CONCAT('key:', n), '',
  LPAD(HEX(n), 32, '0'), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 3 FROM h`)
	require.NoError(t, err)
	_, err = d.DB.ExecContext(ctx, `INSERT INTO idempotency_keys (tenant, scope, key_hash, request_fingerprint, status,
  claim_nonce, created_at, started_at, expires_at, claim_event_id, claimed_by)
WITH RECURSIVE h (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM h WHERE n < 1000)
SELECT CONCAT('t', n % 7), 's', LPAD(HEX(n), 64, '0'), REPEAT('f', 64), 'succeeded', 'n',
  UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), LPAD(HEX(n), 32, '0'), '' FROM h`)
	require.NoError(t, err)
	for _, table := range []string{"idempotency_audit", "idempotency_audit_tally", "idempotency_keys"} {
		_, err = d.DB.ExecContext(ctx, `ANALYZE TABLE `+table)
		require.NoError(t, err)
	}
	indexOf := map[string]string{"idempotency_audit": "idx_idempotency_audit_key_at",
		"idempotency_audit_tally": "uk_idempotency_audit_tally", "k": "uk_idempotency_tenant_scope_key"}
	for _, n := range []int{1, 2, 3} {
		hashes := make([]string, n)
		for i := range hashes {
			hashes[i] = fmt.Sprintf("%064X", i+1)
		}
		query, args, err := sqlx.In(historySQL, "t1", "s", hashes, "t1", "s", hashes, "t1", "s", hashes, 1000)
		require.NoError(t, err)
		seen := 0
		for _, p := range testdb.Explain(t, d.DB, query, args...) {
			t.Logf("%d hashes: %v", n, p)
			if p["table"] == "a" { // is a carried claim's id in the trail: one unique-key lookup
				require.Equal(t, "uk_idempotency_audit_event_id", p["key"], "plan: %v", p)
				continue
			}
			want, ok := indexOf[p["table"]]
			if !ok {
				continue // the derived table and the union's result
			}
			seen++
			require.Equal(t, want, p["key"], "plan: %v", p)
			require.Contains(t, []string{"const", "ref", "range"}, p["type"], "plan: %v", p)
		}
		require.Equal(t, 3, seen, "each of the three tables is read once")
	}
}
