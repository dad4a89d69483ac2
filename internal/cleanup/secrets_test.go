package cleanup_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/cleanup"
	"github.com/idemguard/idemguard/internal/cleanup/cleanuptest"
)

// Cleanup judges a row by its times alone: expired rows go whatever secret made them (a rotated-out
// id, the current one, the unnamed NULL), and live rows stay under every id.
func TestRunDeletesExpiredRowsUnderEverySecretID(t *testing.T) {
	t.Parallel()
	b := setup(t, cleanuptest.Rows{})
	ctx := t.Context()
	_, err := b.db.ExecContext(ctx, `INSERT INTO idempotency_keys
		(tenant, scope, key_hash, request_fingerprint, secret_id, status, claim_nonce, created_at, started_at, heartbeat_at, expires_at)
		VALUES
		('t', 's', REPEAT('a', 64), REPEAT('f', 64), '2026-05', 'succeeded', 'n1', UTC_TIMESTAMP(6) - INTERVAL 2 DAY,
		 UTC_TIMESTAMP(6) - INTERVAL 2 DAY, NULL, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND),
		('t', 's', REPEAT('b', 64), REPEAT('f', 64), '2026-11', 'succeeded', 'n2', UTC_TIMESTAMP(6) - INTERVAL 2 DAY,
		 UTC_TIMESTAMP(6) - INTERVAL 2 DAY, NULL, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND),
		('t', 's', REPEAT('c', 64), REPEAT('f', 64), NULL, 'failed', 'n3', UTC_TIMESTAMP(6) - INTERVAL 2 DAY,
		 UTC_TIMESTAMP(6) - INTERVAL 2 DAY, NULL, UTC_TIMESTAMP(6) - INTERVAL 1 SECOND),
		('t', 's', REPEAT('d', 64), REPEAT('f', 64), '2026-05', 'succeeded', 'n4', UTC_TIMESTAMP(6),
		 UTC_TIMESTAMP(6), NULL, UTC_TIMESTAMP(6) + INTERVAL 1 DAY),
		('t', 's', REPEAT('e', 64), REPEAT('f', 64), NULL, 'succeeded', 'n5', UTC_TIMESTAMP(6),
		 UTC_TIMESTAMP(6), NULL, UTC_TIMESTAMP(6) + INTERVAL 1 DAY)`)
	require.NoError(t, err)
	sum, err := cleanup.Run(ctx, b.db, cleanup.Options{StaleAfter: time.Minute, Logger: b.logger, Sleep: noSleep})
	require.NoError(t, err)
	require.Equal(t, int64(3), sum.Deleted)
	require.Equal(t, int64(2), count(t, b.db))
	require.Equal(t, int64(1), countWhere(t, b.db, `secret_id = '2026-05'`))
	require.Equal(t, int64(1), countWhere(t, b.db, `secret_id IS NULL`))
}
