-- response_events holds the event sequence of a streamed success, as the server-sent events
-- idemguard built from allowlisted chunk fields (never an upstream's raw bytes), in their wire
-- form, so a replay sends the same bytes as every other replay. NULL for a call that did not
-- stream; empty for a stream stored without its events because they were over the size limit
-- (its envelope is stored as usual and a streamed replay is rebuilt from it).

-- +goose Up
ALTER TABLE idempotency_keys ADD COLUMN response_events MEDIUMBLOB NULL AFTER response_code;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN response_events;
