-- The progress a running execution last reported (how many of how many steps, and a stage name
-- from its scope's allowlist), written with its heartbeat by the same renewal statement, so a
-- report costs no write of its own. progress_at is the heartbeat_at of the renewal that wrote it:
-- every replica reads it back and reports each new value once, as a progress event.
-- Every transition back to started (retry, takeover, expired re-claim) clears them: each attempt
-- counts from zero. A completed row keeps its last progress.
--
-- NULL: nothing reported (and on every row written before these columns existed).

-- +goose Up
ALTER TABLE idempotency_keys
  ADD COLUMN progress_done BIGINT NULL AFTER cancel_requested_at,
  ADD COLUMN progress_total BIGINT NULL AFTER progress_done,
  ADD COLUMN progress_stage VARCHAR(48) CHARACTER SET ascii NULL AFTER progress_total,
  ADD COLUMN progress_at DATETIME(6) NULL AFTER progress_stage;

-- +goose Down
ALTER TABLE idempotency_keys
  DROP COLUMN progress_at,
  DROP COLUMN progress_stage,
  DROP COLUMN progress_total,
  DROP COLUMN progress_done;
