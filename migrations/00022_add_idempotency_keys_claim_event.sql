-- A key's row carries its own `claimed` audit event: the event's id and the actor who claimed it
-- (the row already holds when: created_at). The claim of a key not seen before is then one INSERT,
-- exactly as without the audit trail: no transaction, no second statement, and the event is stored
-- with the row by construction (both or neither). A key's history reads the event from the row
-- (store.AuditClaimed, attempt 1, at = created_at) while the row carries it.
--
-- Only what overwrites or deletes the row writes the event to idempotency_audit, in the same
-- transaction as the change: an expired re-claim (which resets created_at), the release of a
-- fresh claim (which deletes the row), and cleanup (which moves the event before it deletes the
-- row). Each then sets claim_event_id to NULL or removes the row, so the event is read from one
-- place at a time.
--
-- Deliberate choices:
--   * Both columns are NULL when the claim had no audit event (the trail off), so a row written
--     without the trail costs nothing more than before, and rows written before this version
--     carry nothing (their claimed event, if any, is in idempotency_audit already).
--   * claim_event_id is CHAR(32) ascii_bin like idempotency_audit.event_id (the same id the audit
--     stream showed); claimed_by is utf8mb4_bin VARCHAR(128) like idempotency_audit.actor.
--   * One DDL statement per file: MySQL commits DDL implicitly.

-- +goose Up
ALTER TABLE idempotency_keys
    ADD COLUMN claim_event_id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL,
    ADD COLUMN claimed_by VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN claim_event_id, DROP COLUMN claimed_by;
