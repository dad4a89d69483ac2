-- The audit kind of a first claim was written "key.claimed" while every other kind is one
-- word or snake_case ("takeover", "expired_reclaim"); it is "claimed" from this version on.
-- Rows written before are rewritten so a key's history reads one form.

-- +goose Up
UPDATE idempotency_audit SET kind = 'claimed' WHERE kind = 'key.claimed';

-- +goose Down
UPDATE idempotency_audit SET kind = 'key.claimed' WHERE kind = 'claimed';
