package mysqlstore

import (
	"context"
	"time"

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
	// idx_idempotency_expires_at from its oldest end.
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
)

// A purge's parameter is a duration in microseconds (statsBefore and
// auditBefore's, or reclaimableSQL's fallback lease).
const (
	statsBefore = `bucket_start < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`
	auditBefore = `at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND`
)

var purges = [...]struct{ table, where, order string }{
	PurgeKeys:    {"idempotency_keys", reclaimableSQL, "expires_at"},
	PurgeStats:   {"idempotency_stats", statsBefore, "bucket_start"},
	PurgeSavings: {"idempotency_savings", statsBefore, "bucket_start"},
	PurgeAudit:   {"idempotency_audit", auditBefore, "at"},
}

// BatchSQL is one batch of p: a DELETE of at most the second parameter's
// rows, oldest first. Parameters: p's duration in microseconds, the batch
// size.
func (p Purge) BatchSQL() string {
	q := purges[p]
	return `DELETE FROM ` + q.table + ` WHERE ` + q.where + ` ORDER BY ` + q.order + ` LIMIT ?`
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
func DeleteBatch(ctx context.Context, ex execer, p Purge, d time.Duration, limit int) (int64, error) {
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
