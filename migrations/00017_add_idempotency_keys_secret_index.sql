-- idx_idempotency_secret serves the per-secret row counts: `idemguard stats` (live rows per secret
-- id, to know when a rotated-out secret can be dropped) and the check `serve` makes at start for
-- rows under an id it is not configured with.
--
-- Deliberate choices:
--   * Covering: the counts read secret_id, status and expires_at only, so they are a scan of this
--     index alone, never of the rows with their JSON responses.
--   * The cost: one more index entry per claim, and an update of it on each commit (status and
--     expires_at change). Heartbeats do not touch it.

-- +goose Up
CREATE INDEX idx_idempotency_secret ON idempotency_keys (secret_id, status, expires_at);

-- +goose Down
DROP INDEX idx_idempotency_secret ON idempotency_keys;
