-- idempotency_audit is the audit trail: one row per idempotency decision (store.AuditEvent).
-- The decisions that change a key's row (claimed, expired_reclaim, takeover, retried, abandoned,
-- released, canceled) are written in the same transaction as that change, so the trail never
-- shows a change the table does not have, nor misses one it does; replays, in_progress answers
-- and conflicts are written later in batches. Pruned by cleanup after --audit-retention.
--
-- Deliberate choices:
--   * event_id is the event's own id (32 hex characters, ordered by creation time). It is unique:
--     a batch retried after an unknown outcome re-inserts nothing (the store drops the ids the
--     duplicate key reports as stored; never INSERT IGNORE, which would turn a truncation into a
--     warning). The service's user only INSERTs and SELECTs here: it cannot rewrite the trail.
--   * key_hash is the key's full HMAC (idempotency_keys.key_hash), so a key's history is found
--     under each secret's hash; the REST API shows only a prefix of it. No raw key, inputs,
--     answer or credential is ever stored here.
--   * at is the event's time as the engine decided it (the database clock of the read the
--     decision came from), DATETIME(6) in UTC like every time in the schema; never TIMESTAMP.
--   * Identifiers use ascii_bin (byte-exact, case-sensitive, like idempotency_keys); actor is
--     utf8mb4 (a name a caller chose, at most 128 bytes), '' when the caller is not known.
--   * original_at (replays), stop_reason (abandoned) and detail (in_progress) are NULL when the
--     kind has none.
--   * id is BIGINT UNSIGNED AUTO_INCREMENT: a skipped duplicate burns auto-increment values.
--   * idx_idempotency_audit_key_at serves a key's history (tenant, scope, key hashes, by time);
--     idx_idempotency_audit_at serves cleanup's retention (ORDER BY at LIMIT n).
--   * One DDL statement per file: MySQL commits DDL implicitly.

-- +goose Up
CREATE TABLE idempotency_audit (
    id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    event_id    CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    kind        VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    at          DATETIME(6)  NOT NULL,
    tenant      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    scope       VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    key_hash    CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    attempt     INT UNSIGNED NOT NULL,
    actor       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    original_at DATETIME(6)  NULL,
    stop_reason VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    detail      VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_idempotency_audit_event_id (event_id),
    KEY idx_idempotency_audit_key_at (tenant, scope, key_hash, at),
    KEY idx_idempotency_audit_at (at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE idempotency_audit;
