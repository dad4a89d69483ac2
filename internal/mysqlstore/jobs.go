package mysqlstore

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"

	"github.com/idemguard/idemguard/store"
)

// renewSQL is the heartbeat of a running execution. heartbeat_at always
// moves forward, by at least a microsecond (so a matched row is a changed
// row); expires_at never moves back. Whether a cancel was requested comes
// back in the statement's OK packet, as LAST_INSERT_ID(expr) with expr 2
// (requested) or 1 (not), so a renewal stays one round trip (see
// completeSQL). 0 means the engine did not report it (TiDB may not): the
// flag is then read back.
const renewSQL = `UPDATE idempotency_keys SET
  heartbeat_at = GREATEST(UTC_TIMESTAMP(6), COALESCE(heartbeat_at, started_at) + INTERVAL 1 MICROSECOND)
    + INTERVAL 0 * LAST_INSERT_ID(1 + (cancel_requested_at IS NOT NULL)) MICROSECOND,
  expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
WHERE id = ? AND status = 'started' AND claim_nonce = ?`

// renewProgressSQL is renewSQL carrying the execution's latest progress:
// the same one statement, so a report costs no write of its own. A
// single-table UPDATE assigns left to right, so the progress's time is the
// heartbeat_at this statement wrote.
var renewProgressSQL = strings.Replace(renewSQL, "\nWHERE", `,
  progress = `+progressSQL("heartbeat_at")+`
WHERE`, 1)

// progressSQL is the progress column's value "<done> <total> <at> <stage>"
// from three parameters (done, total, stage) and the column at, in
// microseconds since the Unix epoch (see the migration that adds it).
func progressSQL(at string) string {
	return `CONCAT(?, ' ', ?, ' ', TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ` + at + `), ' ', ?)`
}

// parseProgress reads the progress column; zero for NULL or anything it
// did not write.
func parseProgress(v sql.NullString) store.Progress {
	parts := strings.SplitN(v.String, " ", 4)
	if !v.Valid || len(parts) != 4 {
		return store.Progress{}
	}
	done, err1 := strconv.ParseInt(parts[0], 10, 64)
	total, err2 := strconv.ParseInt(parts[1], 10, 64)
	at, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return store.Progress{}
	}
	return store.Progress{Done: done, Total: total, Stage: parts[3], At: time.UnixMicro(at).UTC()}
}

// Renew implements store.Store.
func (s *Store) Renew(ctx context.Context, p store.RenewParams) (store.RenewResult, error) {
	query, args := renewSQL, []any{micros(p.Extend), p.ID, p.Nonce}
	if g := p.Progress; g != nil {
		query, args = renewProgressSQL, []any{micros(p.Extend), g.Done, g.Total, g.Stage, p.ID, p.Nonce}
	}
	res, err := s.db.ExecContext(ctx, query, args...)
	ok, err := changedOne(res, err)
	if !ok || err != nil {
		return store.RenewResult{}, err
	}
	flag, err := s.okPacketTime(res)
	if err != nil {
		return store.RenewResult{}, err
	}
	if flag == 0 {
		// Not in the OK packet: read it back. If that read fails, the
		// error makes this beat fail like any other store error, and the
		// next one tries again.
		var requested bool
		err := s.db.GetContext(ctx, &requested,
			`SELECT cancel_requested_at IS NOT NULL FROM idempotency_keys WHERE id = ? AND claim_nonce = ?`, p.ID, p.Nonce)
		if err != nil {
			return store.RenewResult{}, interpretError(err)
		}
		return store.RenewResult{Renewed: true, CancelRequested: requested}, nil
	}
	return store.RenewResult{Renewed: true, CancelRequested: flag == 2}, nil
}

// requestCancelSQL marks a cancel request on one execution. The time moves
// forward by at least a microsecond, so a second request still changes the
// row (changed = matched).
const requestCancelSQL = `UPDATE idempotency_keys SET
  cancel_requested_at = GREATEST(UTC_TIMESTAMP(6), COALESCE(cancel_requested_at + INTERVAL 1 MICROSECOND, UTC_TIMESTAMP(6)))
WHERE id = ? AND status = 'started' AND claim_nonce = ?`

// RequestCancel implements store.Store.
func (s *Store) RequestCancel(ctx context.Context, p store.CancelParams) (bool, error) {
	return s.audited(ctx, p.Audit, requestCancelSQL, p.ID, p.Nonce)
}
