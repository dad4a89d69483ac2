-- lease_micros is the owner's promise: the StaleAfter, in microseconds, of the
-- caller that claimed (or took over, or retried) a started row. Staleness is judged with it, never
-- with the reader's own setting: a started row is stale once
--   COALESCE(heartbeat_at, started_at) < UTC_TIMESTAMP(6) - INTERVAL lease_micros MICROSECOND,
-- so a rolling change of a scope's stale_after never lets a replica with the shorter setting take
-- over a healthy run of a replica with the longer one. The owner cancels its own operation before
-- that instant, on its own timer.
--
-- NULL for rows written before this column existed (and after a roll-back to a version that does
-- not write it): readers then use their own StaleAfter, as before.

-- +goose Up
ALTER TABLE idempotency_keys ADD COLUMN lease_micros BIGINT UNSIGNED NULL AFTER heartbeat_at;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN lease_micros;
