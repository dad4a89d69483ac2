-- progress is what a running execution last reported of how far it got, written with its
-- heartbeat by the same renewal statement (and by the commit), so a report costs no write of its
-- own: "<done> <total> <at> <stage>", where at is the heartbeat_at (or completed_at) of the
-- statement that wrote it in microseconds since the Unix epoch (every replica reports each new at
-- once, as a progress event), total 0 is "not known" and stage, a name from the scope's allowlist
-- ([A-Za-z0-9._:-]), may be empty. One column rather than four: every read of a row scans it, and
-- each column of a result costs the driver an allocation on the replay path.
-- Every transition back to started (retry, takeover, expired re-claim) clears it: each attempt
-- counts from zero. A completed row keeps its last progress.
--
-- NULL: nothing reported (and on every row written before this column existed).

-- +goose Up
ALTER TABLE idempotency_keys ADD COLUMN progress VARCHAR(112) CHARACTER SET ascii NULL AFTER cancel_requested_at;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN progress;
