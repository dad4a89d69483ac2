-- What the guard ran and saved, per hour, tenant and scope: the executions it let through, and
-- the calls, tokens and cost that replays answered instead of running the operation again.
-- Written like idempotency_stats (every replica adds its counts to the hour's row with
-- INSERT ... ON DUPLICATE KEY UPDATE col = col + VALUES(col)); pruned by cleanup with the stats.
-- avoided_cost_nanos is in billionths of the currency of the scope's configured prices.

-- +goose Up
CREATE TABLE idempotency_savings (
    bucket_start              DATETIME(6)     NOT NULL,
    tenant                    VARCHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    scope                     VARCHAR(255)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    executions                BIGINT UNSIGNED NOT NULL DEFAULT 0,
    avoided_calls             BIGINT UNSIGNED NOT NULL DEFAULT 0,
    avoided_prompt_tokens     BIGINT UNSIGNED NOT NULL DEFAULT 0,
    avoided_completion_tokens BIGINT UNSIGNED NOT NULL DEFAULT 0,
    avoided_cost_nanos       BIGINT UNSIGNED NOT NULL DEFAULT 0,
    updated_at                DATETIME(6)     NOT NULL,
    PRIMARY KEY (bucket_start, tenant, scope)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE idempotency_savings;
