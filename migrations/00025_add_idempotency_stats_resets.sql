-- resets counts, per hour and scope, the finished keys run again on request: a reset of a stored
-- answer (DELETE of the key, `idemguard keys reset`) or a forced run (Idempotency-Force-New)
-- that replaced it. The operator page shows them beside takeovers and failures.
--
-- Deliberate choices:
--   * A counter column like the others, 0 for every hour before it existed: the recorder adds to
--     it with the same upsert as the other counters.
--   * ADD COLUMN with a default is instant on MySQL 8 and MariaDB 10.3+ (metadata only): the
--     recorder's upserts go on while it runs.

-- +goose Up
ALTER TABLE idempotency_stats ADD COLUMN resets BIGINT UNSIGNED NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE idempotency_stats DROP COLUMN resets;
