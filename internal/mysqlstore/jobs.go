package mysqlstore

import (
	"context"

	"github.com/idemguard/idemguard"
)

// renewSQL is the heartbeat of a running execution. heartbeat_at always
// moves forward, by at least a microsecond (so a matched row is a changed
// row); expires_at never moves back. Whether a cancel was requested comes
// back in the statement's OK packet, as LAST_INSERT_ID(expr) with expr 1 or
// 0 (see completeSQL), so a renewal stays one round trip. An UPDATE that
// matches no row evaluates no LAST_INSERT_ID and reports 0.
const renewSQL = `UPDATE idempotency_keys SET
  heartbeat_at = GREATEST(UTC_TIMESTAMP(6), COALESCE(heartbeat_at, started_at) + INTERVAL 1 MICROSECOND)
    + INTERVAL 0 * LAST_INSERT_ID(cancel_requested_at IS NOT NULL) MICROSECOND,
  expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
WHERE id = ? AND status = 'started' AND claim_nonce = ?`

// Renew implements idemguard.Store.
func (s *Store) Renew(ctx context.Context, p idemguard.RenewParams) (idemguard.RenewResult, error) {
	res, err := s.db.ExecContext(ctx, renewSQL, micros(p.Extend), p.ID, p.Nonce)
	ok, err := changedOne(res, err)
	if !ok || err != nil {
		return idemguard.RenewResult{}, err
	}
	canceled, err := res.LastInsertId()
	if err != nil {
		return idemguard.RenewResult{}, err
	}
	return idemguard.RenewResult{Renewed: true, CancelRequested: canceled == 1}, nil
}

// requestCancelSQL marks a cancel request on one execution. The time moves
// forward by at least a microsecond, so a second request still changes the
// row (changed = matched).
const requestCancelSQL = `UPDATE idempotency_keys SET
  cancel_requested_at = GREATEST(UTC_TIMESTAMP(6), COALESCE(cancel_requested_at + INTERVAL 1 MICROSECOND, UTC_TIMESTAMP(6)))
WHERE id = ? AND status = 'started' AND claim_nonce = ?`

// RequestCancel implements idemguard.Store.
func (s *Store) RequestCancel(ctx context.Context, p idemguard.CancelParams) (bool, error) {
	return s.audited(ctx, p.Audit, requestCancelSQL, p.ID, p.Nonce)
}
