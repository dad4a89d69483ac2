-- idempotency_stats holds the guard's protocol counters in hourly buckets per scope, so that
-- `idemguard stats` can report the cache hit rate (replays / requests) without a write on the
-- replay path. Written by internal/stats.Recorder: each server process adds its in-memory counts
-- every few seconds with INSERT ... ON DUPLICATE KEY UPDATE col = col + VALUES(col), so any number
-- of replicas sum into the same rows. See internal/stats and docs/OPERATIONS.md.
--
-- Deliberate choices:
--   * bucket_start is the start of the hour (UTC, database clock at flush time); DATETIME(6) like
--     every time in idemguard.
--   * Per scope, not per tenant: engine.Event carries no tenant, and the alert thresholds are
--     service-wide. The primary key is (bucket_start, scope), so `stats --since` reads one range.
--   * requests = claims + retries + takeovers + replays + in_progress + retry_limits + mismatches:
--     every call that got an answer from the guard, counted once. failures and lost_claims count
--     operation outcomes of the executions started by claims, retries and takeovers.
--   * BIGINT UNSIGNED counters: never wrap.

-- +goose Up
CREATE TABLE idempotency_stats (
    bucket_start DATETIME(6)     NOT NULL,
    scope        VARCHAR(255)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    requests     BIGINT UNSIGNED NOT NULL DEFAULT 0,
    claims       BIGINT UNSIGNED NOT NULL DEFAULT 0,
    retries      BIGINT UNSIGNED NOT NULL DEFAULT 0,
    takeovers    BIGINT UNSIGNED NOT NULL DEFAULT 0,
    replays      BIGINT UNSIGNED NOT NULL DEFAULT 0,
    in_progress  BIGINT UNSIGNED NOT NULL DEFAULT 0,
    retry_limits BIGINT UNSIGNED NOT NULL DEFAULT 0,
    mismatches   BIGINT UNSIGNED NOT NULL DEFAULT 0,
    failures     BIGINT UNSIGNED NOT NULL DEFAULT 0,
    lost_claims  BIGINT UNSIGNED NOT NULL DEFAULT 0,
    store_errors BIGINT UNSIGNED NOT NULL DEFAULT 0,
    updated_at   DATETIME(6)     NOT NULL,
    PRIMARY KEY (bucket_start, scope)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE idempotency_stats;
