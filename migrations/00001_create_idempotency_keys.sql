-- idempotency_keys holds one row per (tenant, scope, key_hash): the claim, its owner nonce, and the
-- sanitized response to replay.
--
-- Deliberate choices:
--   * Every time is DATETIME(6) in UTC, written from the database clock (UTC_TIMESTAMP(6)). Never
--     TIMESTAMP: it ends in 2038, shifts with the session time zone, and a bare TIMESTAMP column may
--     silently become NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP.
--   * Identifiers use ascii_bin: case-sensitive and byte-exact, so tenant `Acme` and `acme` never
--     collide, and the unique key stays small (1 byte per character).
--   * id is BIGINT UNSIGNED: failed claim INSERTs (duplicate key) burn auto-increment values.
--   * One DDL statement per file: MySQL commits DDL implicitly, so a half-applied multi-statement
--     migration could not be re-run.

-- +goose Up
CREATE TABLE idempotency_keys (
    id                  BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    tenant              VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    scope               VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    key_hash            CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    request_fingerprint CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status              ENUM('started', 'succeeded', 'failed') NOT NULL,
    attempt_count       INT UNSIGNED NOT NULL DEFAULT 1,
    claim_nonce         VARCHAR(40)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    response_json       JSON NULL,
    response_code       SMALLINT NULL,
    created_at          DATETIME(6) NOT NULL,
    started_at          DATETIME(6) NOT NULL,
    heartbeat_at        DATETIME(6) NULL,
    completed_at        DATETIME(6) NULL,
    expires_at          DATETIME(6) NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_idempotency_tenant_scope_key (tenant, scope, key_hash),
    KEY idx_idempotency_expires_at (expires_at),
    KEY idx_idempotency_status_heartbeat (status, heartbeat_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE idempotency_keys;
