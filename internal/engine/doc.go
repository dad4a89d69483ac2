/*
Package engine is idemguard's guard: it runs an expensive operation at most
once per (tenant, scope, key), however many callers and processes race, and
answers every duplicate with the stored, sanitized result.

# Overview

A caller hands WithIdempotency a Call (tenant, scope, optional client key,
inputs, settings) and an Operation. The guard derives

	key_hash    = HMAC(secret, tagged(tenant, scope, client key | canonical inputs))
	fingerprint = HMAC(secret, tagged("fp", canonical inputs))

(package keys) and then works one row of idempotency_keys through a Store.
Ownership of a row is decided only by two kinds of statement, never by what a
read saw:

  - the claim INSERT, which the unique key (tenant, scope, key_hash) lets
    exactly one caller win;
  - a guarded UPDATE ... WHERE id = ? AND claim_nonce = ? AND attempt_count = ?
    AND <condition>, whose affected-row count says whether this caller won.

Every guarded UPDATE changes a column (a new nonce, a new status, a timestamp
that moves forward), so the count MySQL reports (rows changed) equals rows
matched. No transaction is held open across the operation.

# State Model

	                  claim INSERT (1062 → read the row)
	                             │
	                             ▼
	┌──────────────────────► started ◄──────────────────────────┐
	│                   │    │     │                             │
	│   commit (nonce)  │    │     │ heartbeat older than        │ stale takeover
	│   op succeeded    │    │     │ staleAfter                  │ (policy takeover,
	│                   ▼    │     ▼                             │  attempts < max):
	│           succeeded    │   stale ──────────────────────────┘ new nonce,
	│                 │      │     │                               attempt + 1
	│     replay ◄────┘      │     │ policy fail, or attempts = max:
	│  (cached: true)        │     │ mark failed (abandoned | retry_limit)
	│                        ▼     ▼
	│  failed retry  ◄───── failed ───► attempts = max, abandoned or
	│  (attempts < max:                  retry_limit: the stored failure
	│   new nonce, attempt + 1)          (stopReason retry_limit | abandoned)
	│
	└── expires_at passed (any state but a live started row):
	    re-claim as new (new nonce, attempt 1, new fingerprint)

Answers to a caller that does not own the row:

	succeeded                 → replay: stored envelope, cached: true, stored status code
	started, heartbeat fresh  → in_progress (409), or wait (bounded, polling with backoff)
	failed, attempts left     → retry: this caller claims the row and runs the operation
	failed, none left         → the stored failure, stopReason retry_limit
	client key, other inputs  → ErrFingerprintMismatch, nothing runs

The rule, as a formula: a caller runs the operation iff it changed the row
from "absent", "expired and not live", "stale" (policy takeover, attempt_count
< maxAttempts) or "failed" (attempt_count < maxAttempts) to "started with my
nonce"; and its result is stored iff the row is still "started with my nonce"
when it commits.

# Heartbeat

While the operation runs, the owner renews heartbeat_at every staleAfter/3 with
UPDATE ... WHERE id = ? AND claim_nonce = mine. Zero rows changed means the
claim was taken over: the operation's context is cancelled with cause
ErrOwnershipLost. A heartbeat that cannot reach the store is retried; once
the store has been unreachable for a whole staleAfter another caller may
already own the row, so the operation is cancelled the same way.

# Failure Handling

  - Store down before the operation: WithIdempotency returns a StoreError
    (errors.Is ErrStoreUnavailable) and the operation does not run. Fail closed.
  - Operation error, panic or timeout: the row becomes failed with a sanitized
    {ok:false, stopReason} (provider_error, unknown, timeout, or the
    OpError's reason) and status code 502; it is retryable while attempts
    remain. A business answer with ok:false (needs_human) is a success.
  - Claim lost while running (heartbeat saw another nonce, or the commit
    changed no row): the caller still gets its own result, marked LostClaim,
    and nothing is written — a replaced owner never overwrites the new owner.
  - Store down at commit: the commit is retried three times; then the caller
    gets its result, the row stays started and is taken over once stale.
    A retry that finds the row already completed with our nonce counts as
    committed (the first reply was lost, not the write).
  - Multi-primary clusters (Galera, TiDB): error 1213 on the claim INSERT or a
    guarded UPDATE means "lost the race": the store reports a duplicate or
    zero rows and the guard re-reads, with a bounded, jittered retry.
  - Guard.Close: running operations are cancelled (cause ErrShuttingDown)
    and stored as failed — timeout (retryable) under policy takeover,
    abandoned (final) under policy fail.

# Replay cache

A succeeded row cannot change until it expires, so a Guard keeps recent
succeeded results in memory (Config.ReplayCacheSize) and answers replays of
them without a round trip. An entry lives at most ReplayCacheMaxAge and never
past the row's remaining TTL as the store's clock measured it; the fingerprint
is still checked on every hit.
*/
package engine
