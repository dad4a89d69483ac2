/*
Package idemguard guards expensive operations — AI model calls above all —
with Stripe-style idempotency keys: for one (tenant, scope, key) the operation
runs once, concurrent duplicates do not run it again, a run that died is taken
over after a stale threshold, and every duplicate gets the stored, sanitized
answer. State lives in MySQL 8, MariaDB 10.11+ or TiDB, so the promise holds
across any number of processes.

# A first program

	db, err := mysql.Open(ctx, "app:secret@tcp(127.0.0.1:3306)/app", mysql.PoolConfig{})
	if err != nil { ... }
	if err := mysql.Migrate(ctx, db); err != nil { ... } // or apply package migrations with your goose
	guard, err := idemguard.New(idemguard.Config{Store: mysql.NewStore(db), Secret: secret})
	if err != nil { ... }
	defer guard.Close(ctx)

	res, err := guard.Do(ctx, idemguard.Call{
		Tenant:    "acme",
		Scope:     "actionRequests.aiProposeCopy",
		ClientKey: r.Header.Get("Idempotency-Key"), // optional: else derived from Inputs
		Inputs:    map[string]any{"draft": idemguard.HashUserText(draft)},
	}, func(ctx context.Context) (any, error) {
		text, err := callModel(ctx, draft)
		if err != nil {
			return nil, err // stored failed (provider_error); retried while attempts remain
		}
		return map[string]any{"ok": true, "data": map[string]any{"copy": text}}, nil
	})

res.Status is StatusSucceeded (res.Cached on a replay), StatusInProgress or
StatusFailed; res.Body is the sanitized JSON answer, identical for every
caller but for "cached". Errors are returned only for invalid input, a reused
key with other inputs, an unreachable store (the operation did not run) and
a result that is not a JSON object; see the Err variables.

# What is stored

An operation's value is sanitized into the envelope of package sanitize
(ok, stopReason, createdActionRequestIds, traceId, needsHuman, data with
primitive values); everything else is dropped, and each dropped field is
logged by name, never by value, and counted. With Call.Keep the operation's own
JSON is kept instead, reduced to the fields a sanitize.Allowlist names (the
routers middleware uses it on a team's own routes); the blocked keys go at any
depth either way, and Result.DroppedFields names what went. Inputs and keys are
stored only as HMACs under Config.Secret.

Package mysql (github.com/idemguard/idemguard/mysql) is the MySQL store;
this package links no database driver, so tests and single-process tools can
use memstore.New (package store/memstore) alone.

# Long-running operations

Guard.Start claims like Do and returns once the claim is won, while the
operation runs in the background under the same rules; Guard.Watch follows a
key's transitions from any process sharing the store, Guard.Cancel asks its
running execution to stop (it ends canceled and may run again), and
Guard.WaitJobs waits for the background operations in a shutdown's grace.
Lookup, Watch, Cancel and History name a key by a Key the Guard makes:
Guard.Key from a client key, Guard.KeyOfHash from Result.KeyHash.

# The audit trail

With Config.Audit on, every decision is a store.AuditEvent (a claim, a takeover, a
retry, an abandon, a release, a cancel, a replay, an in-progress answer, a
conflict), naming the caller (Call.Actor, or WithActor on the context) and the
key only by its HMAC. With AuditConfig.Observe, Config.Observe gets each one
as an Event of kind EventAudit (one subscription for metrics and the trail:
see Event); with AuditConfig.Store the store keeps them: the decisions that change a row travel with the write that
makes the change, one transaction in the MySQL store, so the trail can never
hold a claim that did not happen nor miss one that did, even across a crash.
Read-only decisions are written in batches that never slow a call (dropped
and counted when they cannot keep up). Guard.History reads a key's trail.

# Where to go next

  - Package routers: the same guard as gin and net/http middleware for your
    own routes, and the REST API of `idemguard serve`, mountable in your gin
    router.
  - Package migrations: the schema, as goose files.
  - Package store: the interface a store implements, with its conformance
    suite (store/storetest) and the in-memory store (store/memstore).
  - Package idemguardtest: the guard's clock and protocol knobs for tests.
  - The repository's README: the guarantees, and docs/README.md, which
    lists the guides: the Go package, the REST API, configuration, operations.
*/
package idemguard
