/*
Package routers is idemguard's HTTP side on gin: the REST API — handlers for
guarded operations, key lookup, health and metrics — and Idempotent, the
middleware that puts the same guard on a team's own gin routes. Package
routers/middleware is that middleware for net/http, and links no gin. Every
entry path (an operation, a background job, a stream, the middleware plain
and streamed) reads its request, builds its call, names its key and writes
its errors with one pipeline, so a client cannot tell the doors apart by how
they refuse, replay or wait. docs/openapi.yaml describes every route of the
API; a test checks it against the router built here.

New builds the API as a whole http.Handler; Register mounts its /v1/ops
routes in a team's own gin engine (Options.Prefix moves them).

# Routes

	POST /v1/ops/{scope}             run the scope's operation under an idempotency key
	GET  /v1/ops/{scope}/keys/{key}  the record of a key (client key, or ~<key hash>)
	GET  /v1/ops/{scope}/keys/{key}/events  the key's transitions (server-sent events)
	POST /v1/ops/{scope}/keys/{key}/cancel  ask the key's running execution to stop
	GET  /v1/ops/{scope}/keys/{key}/history the key's audit trail, oldest first (404 without events)
	GET  /healthz                    the process is up: 200 {"status":"ok"}
	GET  /readyz                     Options.Ready: 200 {"status":"ok"} or 503 problem
	GET  /metrics                    Options.Metrics (404 problem when nil)
	GET  /v1/stats?since=24h         the operator page's figures, for the caller's tenant (Options.Stats)
	GET  /ops                        Options.OpsPage, the operator page (404 problem when nil)

The /v1 routes need `Authorization: Bearer <api key>` (auth.Authenticator).
Authentication also names the caller for the audit trail, once per request
(idemguard.WithActor): an API key as "key:<its configured name>", a JWT as
"jwt:" and Guard.HashActor of its subject (a pseudonym: the subject may be
personal data).

# POST /v1/ops/{scope}

Checks run in this order, and each failure answers before anything is stored
or run:

 1. credentials → 401, whose detail and WWW-Authenticate (RFC 6750:
    Bearer realm="idemguard", plus error="invalid_token" and an
    error_description when a credential was sent) say which check failed:
    missing, malformed, unknown API key, expired, not yet valid, wrong
    issuer or audience, unknown key id, bad signature, missing claim,
    invalid tenant claim. They never name what the service expects.
 2. the scope is registered → 404; the tenant's request rate (Options.Limits)
    → 429 rate-limit or scope-rate-limit, with Retry-After (every route
    of a key counts too)
 3. Idempotency-Key: at most one header (400); a bare token or an RFC 8941
    sf-string ("abc") holding 1–255 characters of [A-Za-z0-9_.:-] (400);
    required when the scope says so (400)
 4. the body: at most Options.MaxBodyBytes (413); valid JSON, any JSON value
    (400). An empty (or all-white-space) body is taken as {}, so a plain
    `curl -X POST` works; the Content-Type is not checked.
 5. the scope's Validate, when set: inputs that do not fit the operation's
    schema are a 400 invalid-input whose errors member lists each field as
    {pointer, detail} (RFC 6901 pointer into the body). The key is not
    claimed, so the corrected body runs under it.
 6. Prefer: wait=N (RFC 7240, integer seconds; the first wait preference
    counts, invalid ones are ignored) is capped at Options.MaxWait and
    answered with Preference-Applied: wait=N (N the capped wait, rounded up
    to whole seconds). Set the Guard's Config.MaxWait at least as high.
 7. Prefer: respond-async: the operation runs in the background (Guard.Start)
    and the answer is 202 with the key record, Location and
    Preference-Applied: respond-async, for the request that started it and
    for every duplicate while it runs; with wait=N as well, a key that
    completes within N seconds is answered with its outcome instead.

Then the guard runs the scope's operation (detached from the request: a
client that hangs up still gets the result on retry). Answers:

  - succeeded: the result's status code and body verbatim (application/json).
    A replay equals the first answer byte for byte except "cached":true, and
    carries Idempotent-Replayed: true and Idempotent-Completed-At (RFC 3339,
    UTC: when the answer was stored).
  - in progress: 409 problem+json, stopReason in_progress, Retry-After
    (Options.RetryAfter).
  - failed: the result's status code (502) as problem+json with ok:false and
    the stopReason (provider_error, timeout, rate_limited, retry_limit,
    abandoned, ...). The body depends only on the status, the stopReason and
    cached, so a replayed failure equals the first one except "cached":true.

Every answer from the guard (200, 409, 502; 422 and 503 too when a client key
was sent) carries Location: /v1/ops/{scope}/keys/{ref} and Idempotency-Key-Ref:
{ref}, where ref is the client key or, for a derived key, "~" followed by the
result's key hash. "~" is not allowed in a client key, so the two never
collide.

# Middleware

Idempotent and middleware.Idempotent store the wrapped handler's status and JSON
body as its answer, except for statuses that do not answer the inputs: a
5xx (provider_error), 429 (rate_limited), 408 (timeout), 409 (the state of
the moment: provider_error), 401 and 403 (the credentials: provider_error).
Those are stored as retryable failures: the caller whose request ran the
handler gets the handler's own answer as written (any body, not stored),
and the next request with the key runs the handler again while attempts
remain (a duplicate that finds the stored failure gets a 502 problem). Any other status (2xx, 400, 404, 422, ...) is stored and
replayed for the TTL.

A request without a tenant is a 401 whose detail names no credential
scheme (the team's authentication is its own) and which carries no
WWW-Authenticate, unless middleware.Options.Tenant failed with idemguard's
own bearer authentication (an *auth.Error, e.g. from
Authenticator.AuthenticateRequest): then the detail and the challenge say
which check failed, as on the REST API.

# Errors

Errors are application/problem+json (RFC 9457): type (urn:idemguard:problem:…),
title, status, detail, plus ok:false and stopReason. The detail never holds
the client key, the body or the credentials.

	400 invalid_input  malformed/missing/duplicate Idempotency-Key, invalid JSON, bad key reference,
	                   inputs that fail the scope's Validate (errors: [{pointer, detail}])
	401 unknown        no or bad credentials; the detail says which check failed
	404 unknown        unknown scope or route; key absent, expired or another tenant's (never 403)
	405 unknown        method not allowed (Allow lists the methods)
	409 in_progress    the key's operation is running (Retry-After)
	429 in_progress    too many requests wait for the key (Retry-After); 429 rate_limited: too many
	                   event streams, or the tenant is over a limit of Options.Limits, named by
	                   the type: concurrency-limit, job-limit, rate-limit (and scope-…),
	                   Retry-After. An execution takes its place (Call.Admit) just before its
	                   claim, after the checks above: a duplicate that joins a running key and a
	                   replay never take one
	413 invalid_input  body over Options.MaxBodyBytes
	422 invalid_input  the client key was used with other inputs
	500 unknown        a bug (logged with its stack); type invalid-result: the operation returned
	                   something other than a JSON object (stored failed, retryable once fixed)
	503 unknown        store unreachable, or not ready (Retry-After: Options.UnavailableRetryAfter)

# Logs

One slog JSON line per request, "http: request", with method, route (the
template, e.g. /v1/ops/:scope), status, duration_ms, and when known tenant,
scope (registered scopes only), key_hash (its first 12 hex digits),
stop_reason and replayed. Never the client key, body or Authorization.
Requests to /healthz, /readyz and /metrics are logged at debug level.
*/
package routers
