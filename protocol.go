package idemguard

/*
How the guard works, for those who change it: it runs an expensive operation
at most once per (tenant, scope, key), however many callers and processes
race, and answers every duplicate with the stored, sanitized result.

# Overview

A caller hands Do a Call (tenant, scope, optional client key,
inputs, settings) and an Operation. The guard derives

	key_hash    = HMAC(secret, tagged(tenant, scope, client key | canonical inputs))
	fingerprint = HMAC(secret, tagged("fp", canonical inputs))

(package keys) and then works one row of idempotency_keys through a store.Store.
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
	│   op succeeded    │    │     │ its lease (staleAfter)      │ (policy takeover,
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
	└── expires_at passed (any state but a live started row), or reset:
	    re-claim as new (new nonce, attempt 1, new fingerprint)

	succeeded or failed ──forced run (Call.ForceNew, AllowReset)──► started
	                       new nonce, attempt + 1

	succeeded or failed ──reset (Guard.Reset, AllowReset)──► expired
	                       new nonce, expires_at = 1970-01-01 00:00:01

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

# Lease and Heartbeat

The lease is the owner's promise of how long it may go silent. The claim (or takeover, or
retry) write is the first beat; while the operation runs, and while its
outcome is committed, the owner renews heartbeat_at every staleAfter/3 with
UPDATE ... WHERE id = ? AND status = 'started' AND claim_nonce = mine. As a
formula, with t_b the local time the last successful beat was *sent*:

	owner cancels at     t_b + staleAfter − margin   (its own timer; margin =
	                     staleAfter/10, at least 100ms, at most staleAfter/3)
	others may take over  heartbeat_at + lease < now          (database clock)

heartbeat_at is stamped while the statement executes, never before it was
sent, so the owner always stops first, whether or not the database answers.
The row stores the owner's lease (lease_micros: its staleAfter), and
takeover, abandon, expiry and lookup judge staleness
with it, never with the reader's setting: a rolling change of stale_after
cannot take over a healthy run. A renewal that changes no row means the
claim was taken over: the operation is cancelled at once (cause
ErrOwnershipLost). A renewal that fails is retried soon and cancels nothing
by itself; only the lease timer does.

# Failure Handling

Decide by the row, never by the error. Every write runs
detached from the caller's cancellation, bounded by StoreTimeout.

  - store.Store down before the operation: Do returns a StoreError
    (errors.Is ErrStoreUnavailable) and the operation does not run. Fail closed.
  - A claim INSERT or a retry/takeover UPDATE whose outcome is unknown (a
    dropped connection after sending, a timeout, error 1213 or 1205, which
    the store reports as store.ErrOutcomeUnknown): the row is re-read, with
    jittered pauses, for up to StoreTimeout. Our nonce → we own it; another
    nonce → we lost, and the row answers; no row → claim again. Such a
    write may still land later (an INSERT waiting on a row lock goes on
    after its client gave up), so the call keeps every nonce it has not
    confirmed: any later read that shows one of them is our claim. If the
    call ends without owning the row (the row cannot be read, the caller
    hung up, another answer), a background task gives each unconfirmed
    claim back (store.Store.Release) if it turns up, for as long as the Guard
    lives. A claim INSERT and a Reclaim of one round carry one nonce: a row
    holding it is the Reclaim's when it is the row the Reclaim took (its
    id), and is given back as the Reclaim's (restored, never deleted).
  - A claim write the store refused outright (an error that is neither
    ErrOutcomeUnknown nor a timeout or broken connection: no such table or
    column, a value too long) is re-read once like any other, and unless
    the row shows it, the caller gets that error (a StoreError) at once;
    only unknown outcomes are tried again, with growing jittered pauses,
    and the last error is kept if the tries run out.
  - A Config.Observe that panics is recovered (logged once per event kind):
    a metrics bug never leaves a claim behind.
  - A claim won by a caller that hung up meanwhile (without Detach), or
    racing Guard.Close: nothing runs, and the claim is given back at once.
    Release deletes a fresh claim and restores a reclaimed row to its
    previous failed or stale state: no attempt is burnt, nothing is marked
    abandoned, since the operation never ran.
  - A lease more than half spent before the operation starts (the claim
    had to be settled by re-reading): one heartbeat renews it first, or the
    claim is given back and the caller told nothing ran.
  - Operation error, panic or timeout: the row becomes failed with a sanitized
    {ok:false, stopReason} (provider_error, unknown, timeout, or the
    OpError's reason) and status code 502; it is retryable while attempts
    remain. An upstream that rejects the inputs (invalid_input) is final and
    stored with status 422. A business answer with ok:false (needs_human) is
    a success.
  - Claim lost while running (a heartbeat changed no row, or the commit's
    re-read shows another nonce): the caller still gets its own result,
    marked LostClaim, and nothing is written — a replaced owner never
    overwrites the new owner.
  - Commit whose outcome is unknown, or that changed no row: the row is
    re-read. Our nonce with our outcome → it landed; our nonce still started
    → try again, heartbeats still renewing the lease, for as long as the
    lease holds; then the caller gets its result unstored, and the row is
    taken over (or abandoned) once stale.
  - Guard.Close: running operations are cancelled (cause ErrShuttingDown)
    and stored as failed — timeout (retryable) under policy takeover,
    abandoned (final) under policy fail. An operation cut off by its own
    lease is recorded the same way, if its row is still its own.

# Background operations, cancel and watch

Start claims exactly like Do; the call that owns the claim hands the
operation to a goroutine (runInBackground) and answers Accepted, so the
claim, lease, heartbeat and commit rules are the same code. The heartbeat of
every owner is store.Store.Renew:

	UPDATE ... SET heartbeat_at = now (forced forward),
	               expires_at = GREATEST(expires_at, now + TTL + lease)
	 WHERE id = ? AND status = 'started' AND claim_nonce = mine

which also reports whether cancel_requested_at is set (in the OK packet, one
round trip). A running key therefore never expires under its owner, and a
cancel recorded by any process (store.Store.RequestCancel, guarded by the
execution's id and nonce) reaches the owner within one heartbeat: it
cancels the operation with cause ErrCanceled, which is stored as failed /
canceled with the attempt given back (attempt_count - 1), so the same call
runs the key again. Every transition back to started clears the request.

The same renewal carries the operation's progress (package progress): the
latest report, kept in memory since the last renewal (the last wins), is
set on the row in that one statement (the progress column: done, total,
stage and the heartbeat_at written), and the commit
carries the last one; so progress costs no statement of its own, and a
renewal never waits for it. Only numbers and a stage on the scope's
allowlist get that far. Every transition back to started clears it.

Watch derives a key's transitions from its row, the authority, so every
process reports the same events with the same IDs
(<attempt>.<kind>.<unix-micros of the row's own time>): started_at,
heartbeat_at, the progress's time, cancel_requested_at, heartbeat_at + lease
(stale) and completed_at. It polls the row with a backoff capped below the heartbeat
interval; in the owner's process the job's live log wakes it at once.

# Secret Rotation

Every key_hash and fingerprint is an HMAC under a secret, so a new secret
gives every request a new key hash: a row made under the old secret cannot
be found by the new hash, and two replicas claiming one request under two
secrets both win their INSERT (the unique key sees two different hashes). A
Guard therefore knows a current secret (Config.Secret, named by
Config.SecretID) and previous ones (Config.PreviousSecrets), and each row
records its secret's id (secret_id; NULL for the unnamed secret). The rules:

  - Claims are made under the current secret only: an INSERT, or the
    re-claim of an expired row, always carries the current hash. A call that
    finds the row it works on absent or reclaimable while it is on a
    previous secret's row goes back to the current secret to claim.
  - The check after the claim. With previous secrets configured, a call that
    has just won a claim (INSERT, or any guarded UPDATE that hands it a row:
    expired, retry, takeover, a claim whose unknown outcome turned out to be
    its own) reads, before the operation starts, the request's rows under
    every other configured secret: one SELECT by the unique key with all
    the other hashes in one IN list. A row there that is not reclaimable
    (store.Record.Reclaimable: not expired, or a started row within its lease)
    "counts". If none counts, the call runs. If one counts, the call gives
    its claim back (store.Store.Release: the row is deleted or restored, nothing
    ran) and goes on with that row, exactly as with a row of its own: replay
    if succeeded, in progress (or wait) if started, ErrFingerprintMismatch
    judged with that secret's fingerprint, retry or takeover by that row's
    nonce-guarded UPDATE, which is again followed by the check.
  - Of two calls whose claims under two secrets are both live, the one with
    the larger key hash gives its claim back at once; the one with the
    smaller hash reads again for up to crossWaitFor before it gives its own
    back. The tie-break only saves both callers an in-progress answer when
    each saw the other; safety does not rest on it.

As a formula: a call runs the operation iff it won a claim on row R (the
rule of the State Model) and a read made after that claim had landed saw
no row of the request under another configured secret that counts.

Why no interleaving runs the operation twice. Let claims C1 (on the row of
hash h1) and C2 (hash h2 ≠ h1) of one request both run. Each landed (its
statement committed) at t1, t2 and was followed by its check read at
r1 > t1, r2 > t2; say t1 < t2, so r2 > t2 > t1. C1's row existed from t1
on and counted as long as C1 could run: it leaves the table only by
Release (C1 did not run), by cleanup or by an expired re-claim (neither
touches a row that counts: not expired, or started within its lease), and
while C1 runs it is started and heartbeating, and after C1 it is succeeded
or failed until it expires. So at r2 C2's check saw C1's row counting, and
C2 did not run: a contradiction. Within one row, the nonce-guarded
transitions decide as before. Hence two executions of one request need
either the one-row rules (a retry after a failure, a takeover after
silence) or the expiry of the earlier row, the same as with one secret.
The argument needs a read after a committed write to see every write
committed before it: true of one MySQL or MariaDB primary; on Galera set
wsrep_sync_wait (bit 1) for idemguard's sessions, and TiDB's reads are
linearizable. A replica that knows only one secret cannot check the
other's rows at all, which is why a rotation is staged (docs/OPERATIONS.md,
"Rotating the secret"): first every replica learns the new secret as a
previous one while still claiming under the old (no row under the new
secret exists yet, so nothing can race), then replicas switch one by one,
each knowing the other secret, then the old secret is dropped once
`idemguard stats secrets` shows it holds no live row.

Cost: without previous secrets, nothing: no derivation, no read. With them,
two HMACs per previous secret per call, and one extra indexed read on every
call that wins a claim; a replay of a row under the current secret reads
nothing more. A replay of a row under a previous secret is one read when the
guard reads before claiming (read-first reads every configured secret's row
in its one SELECT); otherwise it costs the claim, the check and the release
before the answer, until the row expires.

# Replay cache

A succeeded row cannot change until it expires, so a Guard keeps recent
succeeded results in memory (Config.ReplayCacheSize) and answers replays of
them without a round trip. Entries come from reads only, so they carry the
database's completed_at; an entry lives at most ReplayCacheMaxAge and never
past the row's remaining TTL as the store's clock measured it, counted from
before the read; the fingerprint is still checked on every hit. The cache is
bounded by count, by bytes (Config.ReplayCacheBytes) and per tenant
(Config.ReplayCacheTenantBytes): a tenant past its share evicts its own
least recently used entries, never another tenant's.

# Reset and forced runs

A scope that allows it (Settings.AllowReset; off by default, since a second
run costs what the guard exists to prevent) lets a finished key run again
on request, two ways:

  - Guard.Reset ends the life of a finished row (succeeded or failed, not
    expired) by one guarded UPDATE ... WHERE id = ? AND claim_nonce = ? AND
    attempt_count = ? AND status IN ('succeeded','failed') AND not expired
    that sets a new claim nonce and expires_at to the Unix epoch (plus a
    second): past on every clock, even a database clock stepped back.
    The row is then absent to every reader (Record.Reclaimable), and the
    next call re-claims it as new: attempt 1 of a new life, through the
    expired re-claim of the State Model. The new nonce makes every guarded
    write prepared from a read of the old row lose.
  - Call.ForceNew takes over a finished row as read, by the guarded
    UPDATE of store.ReclaimForced (same guard, status back to started, a
    new nonce, attempt_count + 1, whatever MaxAttempts says), and runs the
    operation under that claim like any retry. A call forces at most the
    first row it reads, and only an answer stored before the call began
    (completed_at before the read's database clock less the time the call
    has taken): a forced call that loses the race, or that finds an answer
    a concurrent run stored, is answered as a duplicate of that run (in
    progress, or its replay), so concurrent forced calls of one key run it
    once, however fast the operation. On an absent or expired key a forced
    call is an ordinary first claim; on a running key it is answered in
    progress at once.

Both are refused (store.ErrResetForbidden) on a scope that does not allow
them, and Reset of a running key is store.ErrKeyRunning: one execution in
flight stays the rule. Each writes its durable audit event (reset: the
attempt it ended; forced: the new attempt) in the transaction of its UPDATE.

The old answer is never served once a reset or forced run has answered.
The rule, with F = resetFence (one second), for a scope that allows resets:

  - a replay cache entry lives at most F from the local time before the
    read (or commit) it came from;
  - a replay answered from a read (the read before the claim, the claim
    loop's read, a stored final failure) is answered only if less than F
    has passed since the local time before that read; otherwise the row
    is read again;
  - a reset answers, and a forced run starts its operation (so that
    nothing of it, not an Accepted nor a stream's first byte, is answered
    earlier), only once F has passed since a local time taken after its
    UPDATE landed.

Why that suffices. Let the reset's UPDATE land at t_r. Any read that saw the
old answer started before t_r (a read that starts later sees the new
nonce or the new status), at local time r < t_r; an answer or cache entry
made from it is served only before r + F < t_r + F. The reset answers
after t_r + F. Only durations are compared, each on one process's
monotonic clock, so no clocks need to agree; the argument assumes clocks
run at the same rate within the fence (drift is parts per million) and a
read after a committed write sees it, as in Secret Rotation. The cost
falls on scopes that allow resets alone: their cached entries are read
again every F, and a reset or a forced run takes F longer. Every process
must agree on a scope's AllowReset: a process that thinks a scope does not
allow resets keeps entries for ReplayCacheMaxAge. Turn it on everywhere,
then wait ReplayCacheMaxAge before the first reset. The simulation checks
the rule (sim.CheckReplayFence) and puts its removal back
(DefectStaleCache).
*/
