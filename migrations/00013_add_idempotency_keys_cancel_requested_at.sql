-- cancel_requested_at records that a caller asked a running key to stop (POST …/keys/{key}/cancel).
-- It is set only by a guarded write on a started row (id, claim_nonce, status = 'started'); the
-- owner reads it back with every heartbeat and cancels its operation, which then completes failed
-- with stopReason canceled. Every transition back to started (retry, takeover, expired re-claim)
-- clears it, so a resubmission of the same key runs afresh.
--
-- NULL: no cancel was asked for (and on every row written before this column existed).

-- +goose Up
ALTER TABLE idempotency_keys ADD COLUMN cancel_requested_at DATETIME(6) NULL AFTER lease_micros;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN cancel_requested_at;
