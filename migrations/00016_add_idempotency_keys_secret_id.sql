-- secret_id names the secret whose HMAC made the row's key_hash and request_fingerprint, so that a
-- rotation of IDEMPOTENCY_SECRET can be followed row by row: `idemguard stats` counts the live rows
-- each id still holds, and the old secret is dropped from the configuration only after its last
-- row has expired. The id is a short name chosen by the operator (IDEMPOTENCY_SECRET_ID), never
-- the secret itself or anything derived from it.
--
-- NULL is the unnamed secret: every row written before this column existed, and every row of a
-- deployment that sets no IDEMPOTENCY_SECRET_ID. A lookup never filters on the column: the key
-- hash alone finds a row, and a hash made under one secret cannot match a hash made under another.

-- +goose Up
ALTER TABLE idempotency_keys ADD COLUMN secret_id VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL AFTER request_fingerprint;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN secret_id;
