-- idempotency_audit_tally is the part of the audit trail that only reads a key: replays,
-- in_progress answers and conflicts (store.AuditEvent with Count), aggregated per key, kind,
-- attempt, actor and detail: one row holds how many there were, the first and the last time, and
-- the first event's id. A retry storm on one key adds to its counts, never rows: the table grows
-- with keys × actors, not with requests. The durable events (what changes a row) stay one row
-- each in idempotency_audit, written with their change.
--
-- Written like idempotency_stats: every replica adds its batch's counts with INSERT ... ON
-- DUPLICATE KEY UPDATE (the service's user needs INSERT, UPDATE and SELECT here, and still only
-- INSERT and SELECT on idempotency_audit). Pruned by cleanup after --audit-retention (by last_at).
--
-- Deliberate choices:
--   * uk_idempotency_audit_tally is the aggregation key. detail is NOT NULL ('' when the kind has
--     none) because a NULL in a unique key never matches, so it would never aggregate.
--   * event_id is the id of the earliest event counted (first_at's), so the row keeps a stable,
--     time-ordered id for a history's order; original_at is the replayed answer's completion time
--     (NULL when the kind has none).
--   * n is BIGINT UNSIGNED: a storm of billions of requests on one key only counts.
--   * idx_idempotency_audit_tally_last serves cleanup's retention (ORDER BY last_at LIMIT n).
--   * One DDL statement per file: MySQL commits DDL implicitly.

-- +goose Up
CREATE TABLE idempotency_audit_tally (
    id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    tenant      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    scope       VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    key_hash    CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    kind        VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    attempt     INT UNSIGNED NOT NULL,
    actor       VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    detail      VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
    event_id    CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    first_at    DATETIME(6)  NOT NULL,
    last_at     DATETIME(6)  NOT NULL,
    n           BIGINT UNSIGNED NOT NULL,
    original_at DATETIME(6)  NULL,
    PRIMARY KEY (id),
    UNIQUE KEY uk_idempotency_audit_tally (tenant, scope, key_hash, kind, attempt, actor, detail),
    KEY idx_idempotency_audit_tally_last (last_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- +goose Down
DROP TABLE idempotency_audit_tally;
