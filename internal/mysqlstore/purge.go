package mysqlstore

import (
	"context"
	"errors"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
)

// Purge names what `idemguard cleanup` (package internal/cleanup) deletes from
// one table. The statements live here, with every other statement on the
// tables; cleanup decides the batching, the pauses and the retries.
type Purge int

// The purges, in the order cleanup runs them.
const (
	// PurgeKeys deletes the rows of idempotency_keys that the staleness rule
	// (store.Record.Reclaimable) calls reclaimable: reclaimableSQL, the
	// fragment the expired reclaim is guarded by. The parameter is the lease
	// of a row that carries none (cleanup's StaleAfter). It walks
	// idx_idempotency_expires_at from its oldest end. A row that carries
	// its claimed audit event (store.ClaimParams.Audit) is deleted only
	// once the event is in idempotency_audit: each batch first moves the
	// events of the rows it is about to delete (DeleteBatch).
	PurgeKeys Purge = iota
	// PurgeStats deletes the idempotency_stats buckets whose hour started
	// longer ago than the parameter (the retention), walking the primary
	// key (bucket_start, scope) from its oldest end.
	PurgeStats
	// PurgeSavings is PurgeStats for idempotency_savings.
	PurgeSavings
	// PurgeAudit deletes the idempotency_audit events older than the
	// parameter, walking idx_idempotency_audit_at from its oldest end.
	PurgeAudit
	// PurgeAuditTally deletes the idempotency_audit_tally rows whose last
	// event is older than the parameter (PurgeAudit's retention), walking
	// idx_idempotency_audit_tally_last from its oldest end.
	PurgeAuditTally
)

// A purge's parameter is a duration in microseconds (statsBefore and
// auditBefore's, or reclaimableSQL's fallback lease).
const (
	statsBefore = `bucket_start < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`
	auditBefore = `at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`
	tallyBefore = `last_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`

	// claimMoved holds for a row of idempotency_keys that carries no
	// claimed event, or whose event is in idempotency_audit already.
	claimMoved = `(claim_event_id IS NULL
  OR EXISTS (SELECT 1 FROM idempotency_audit a WHERE a.event_id = idempotency_keys.claim_event_id))`
)

// moveExpiredClaimsSQL writes to idempotency_audit the claimed events of
// the rows PurgeKeys' next batch would delete (the oldest reclaimable
// rows, at most the second parameter's), those not moved already. It reads
// exactly that batch's rows (a derived table: MySQL allows no LIMIT in an
// IN subquery), never the whole expired range, so a table of expired rows
// without events costs it one index range like the DELETE's. Parameters:
// the fallback lease in microseconds, the batch size.
const moveExpiredClaimsSQL = `INSERT INTO idempotency_audit (` + auditColumns + `)
SELECT k.claim_event_id, 'claimed', k.created_at, k.tenant, k.scope, k.key_hash, 1, COALESCE(k.claimed_by, ''),
  NULL, NULL, NULL
FROM (SELECT id FROM idempotency_keys WHERE ` + reclaimableSQL + ` ORDER BY expires_at LIMIT ?) AS batch
JOIN idempotency_keys k ON k.id = batch.id
WHERE k.claim_event_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM idempotency_audit a WHERE a.event_id = k.claim_event_id)`

var purges = [...]struct{ table, where, order string }{
	PurgeKeys: {"idempotency_keys", reclaimableSQL, "expires_at"},
	// PurgeKeys' DELETE adds claimMoved (BatchSQL); its count does not.
	PurgeStats:   {"idempotency_stats", statsBefore, "bucket_start"},
	PurgeSavings: {"idempotency_savings", statsBefore, "bucket_start"},
	PurgeAudit:   {"idempotency_audit", auditBefore, "at"},

	PurgeAuditTally: {"idempotency_audit_tally", tallyBefore, "last_at"},
}

// BatchSQL is one batch of p: a DELETE of at most the second parameter's
// rows, oldest first. Parameters: p's duration in microseconds, the batch
// size.
func (p Purge) BatchSQL() string {
	q := purges[p]
	where := q.where
	if p == PurgeKeys {
		where += ` AND ` + claimMoved
	}
	return `DELETE FROM ` + q.table + ` WHERE ` + where + ` ORDER BY ` + q.order + ` LIMIT ?`
}

// CountSQL counts what p would delete now (a dry run). Parameter: p's
// duration in microseconds.
func (p Purge) CountSQL() string {
	q := purges[p]
	return `SELECT COUNT(*) FROM ` + q.table + ` WHERE ` + q.where
}

// DeleteBatch runs one batch of p on ex, one autocommit statement, and
// returns the rows it deleted. Errors are the driver's, unchanged: cleanup
// retries by their MySQL error number.
//
// A batch of PurgeKeys is two: moveExpiredClaimsSQL, then the DELETE of
// the rows whose claimed event is in the trail. Neither needs the other to
// be safe: a row whose event did not move (a crash between the two, a row
// that became reclaimable in between) stays for the next batch, and an
// event moved twice at once (an expired re-claim moving the same row's)
// fails one INSERT with a duplicate key, which changes nothing here.
func DeleteBatch(ctx context.Context, ex execer, p Purge, d time.Duration, limit int) (int64, error) {
	if p == PurgeKeys {
		_, err := ex.ExecContext(ctx, moveExpiredClaimsSQL, micros(d), limit)
		var me *mysql.MySQLError
		if err != nil && !(errors.As(err, &me) && me.Number == errDupEntry) {
			return 0, err
		}
	}
	res, err := ex.ExecContext(ctx, p.BatchSQL(), micros(d), limit)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// CountPurgeable returns how many rows p would delete now.
func CountPurgeable(ctx context.Context, q sqlx.QueryerContext, p Purge, d time.Duration) (int64, error) {
	var n int64
	err := sqlx.GetContext(ctx, q, &n, p.CountSQL(), micros(d))
	return n, err
}
