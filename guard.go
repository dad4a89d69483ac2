package idemguard

import (
	"bytes"
	"cmp"
	"context"
	crand "crypto/rand"
	"database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/tenancy"
)

// Guard runs operations at most once per (tenant, scope, key). It is safe for
// concurrent use.
type Guard struct {
	cfg      Config
	store    Store
	deriver  *keys.Deriver
	log      *slog.Logger
	cache    *replayCache
	policy   sanitize.Policy // the size limit of a stored envelope
	now      func() time.Time
	lifetime context.Context
	shutdown context.CancelFunc
	mu       sync.Mutex // guards closed and inflight.Add against Close's Wait
	closed   bool
	inflight sync.WaitGroup
	dropped  droppedNames // field names the allowlist dropped, logged once
	// background counts releaseLater goroutines; they are started only by
	// calls in flight, so Close waits for them after inflight.
	background sync.WaitGroup
	// readFirst is the adaptive read-first state (readfirst.go).
	readFirst hitRates
	// observerPanics holds the event kinds whose Observe panic was logged.
	observerPanics sync.Map
}

// New validates cfg and returns a Guard.
func New(cfg Config) (*Guard, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d, err := keys.New(cfg.Secret)
	if err != nil {
		return nil, err
	}
	cfg.MaxWait = cmp.Or(cfg.MaxWait, DefaultMaxWait)
	cfg.StoreTimeout = cmp.Or(cfg.StoreTimeout, DefaultStoreTimeout)
	cfg.ReplayCacheMaxAge = cmp.Or(cfg.ReplayCacheMaxAge, DefaultReplayCacheMaxAge)
	if cfg.Test.Now == nil {
		cfg.Test.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.ReplayCacheSize == 0 {
		cfg.ReplayCacheSize = DefaultReplayCacheSize
	}
	lifetime, shutdown := context.WithCancel(context.Background())
	return &Guard{
		cfg:      cfg,
		store:    cfg.Store,
		deriver:  d,
		log:      cfg.Logger,
		cache:    newReplayCache(cfg.ReplayCacheSize),
		now:      cfg.Test.Now,
		policy:   sanitize.Policy{MaxBytes: cmp.Or(cfg.MaxResponseBytes, sanitize.DefaultMaxBytes)},
		lifetime: lifetime,
		shutdown: shutdown,
	}, nil
}

// Close cancels the context of every operation still running (cause
// ErrShuttingDown) and waits until they have recorded their outcome or ctx
// ends. A cut-off operation is stored as failed: stopReason timeout (retryable)
// under StaleTakeover, abandoned (final) under StaleFail. Call Close after the
// grace period in which running operations were allowed to finish. Calls
// waiting for a duplicate answer in_progress at once, and calls made after
// Close return a StoreError wrapping ErrShuttingDown (errors.Is
// ErrStoreUnavailable: retry elsewhere) without claiming anything.
func (g *Guard) Close(ctx context.Context) error {
	// Cancel first, then refuse new calls: a call that sees the Guard
	// closed knows every operation has been told to stop.
	g.shutdown()
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	done := make(chan struct{})
	go func() { g.inflight.Wait(); g.background.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ping reports whether the store answers (readiness).
func (g *Guard) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
	defer cancel()
	if err := g.store.Ping(ctx); err != nil {
		return &StoreError{Op: "ping", Err: err}
	}
	return nil
}

// enter counts a call in flight unless the Guard is closed.
func (g *Guard) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.inflight.Add(1)
	return true
}

// prepared is a validated Call.
type prepared struct {
	tenant      string
	scope       string
	keyHash     string
	fingerprint string
	hasKey      bool
	settings    Settings
	wait        time.Duration
	timeout     time.Duration
	detach      bool
}

func (g *Guard) prepare(c Call) (prepared, error) {
	if _, err := tenancy.ParseID(string(c.Tenant)); err != nil {
		return prepared{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if err := keys.ValidateScope(c.Scope); err != nil {
		return prepared{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if c.ClientKey != "" {
		if err := keys.ValidateClientKey(c.ClientKey); err != nil {
			return prepared{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
	}
	if err := c.Settings.Validate(); err != nil {
		return prepared{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if c.Wait < 0 || c.Timeout < 0 {
		return prepared{}, fmt.Errorf("%w: Wait and Timeout must not be negative", ErrInvalidInput)
	}
	canonical, err := keys.CanonicalizeValue(c.Inputs)
	if err != nil {
		return prepared{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	return prepared{
		tenant:      string(c.Tenant),
		scope:       c.Scope,
		keyHash:     g.deriver.KeyHash(string(c.Tenant), c.Scope, c.ClientKey, canonical),
		fingerprint: g.deriver.Fingerprint(canonical),
		hasKey:      c.ClientKey != "",
		settings:    c.Settings.withDefaults(g.cfg.Defaults),
		wait:        min(c.Wait, g.cfg.MaxWait),
		timeout:     c.Timeout,
		detach:      c.Detach,
	}, nil
}

// releaseLaterFor is how long, at least, a Guard keeps trying to give back
// a claim whose caller was told that nothing ran (see releaseLater).
const releaseLaterFor = time.Minute

// maxRaces bounds how often one call re-reads after losing a guarded write
// without waiting; each lost race means another caller made progress, so a
// healthy store never comes near it.
const maxRaces = 16

// Do runs op at most once for (call.Tenant, call.Scope, key) and answers
// every duplicate with the stored result: a success is replayed with Cached
// true; a duplicate of a running call gets StatusInProgress (or waits,
// Call.Wait); a failure is retried while attempts remain.
//
// It returns an error only for invalid input (ErrInvalidInput), a reused
// client key with other inputs (ErrFingerprintMismatch), store failure
// (*StoreError, ErrStoreUnavailable: op did not start) and a result that is
// not a JSON object (ErrInvalidResult, returned with the Result of the stored
// failure). An operation's failure is a Result with Status StatusFailed.
func (g *Guard) Do(ctx context.Context, call Call, op Operation) (Result, error) {
	if op == nil {
		return Result{}, fmt.Errorf("%w: operation is nil", ErrInvalidInput)
	}
	if !g.enter() {
		// Claiming now would only record a failed attempt: the operation
		// would be cut off at once. The caller retries, on another replica.
		return Result{}, &StoreError{Op: "claim", Err: ErrShuttingDown}
	}
	defer g.inflight.Done()
	p, err := g.prepare(call)
	if err != nil {
		return Result{}, err
	}
	if res, fp, ok := g.cache.get(p.tenant, p.scope, p.keyHash, g.now()); ok {
		if fp != p.fingerprint {
			g.emit(Event{Kind: EventMismatch, Scope: p.scope})
			return Result{}, ErrFingerprintMismatch
		}
		g.emit(Event{Kind: EventReplayed, Scope: p.scope, FromMemory: true})
		return res, nil
	}
	return g.readFirstOrExecute(ctx, p, op)
}

func (g *Guard) execute(ctx context.Context, p prepared, op Operation) (Result, error) {
	var waitUntil time.Time
	if p.wait > 0 {
		waitUntil = g.now().Add(p.wait)
	}
	poll := newBackoff(p.settings.StaleAfter)
	var waited time.Duration
	var ownedNonce string
	defer func() {
		if waited > 0 {
			g.emit(Event{Kind: EventWaited, Scope: p.scope, Duration: waited})
		}
	}()
	// unconfirmed are this call's claim writes whose outcome was unknown
	// and that no read has shown yet. A row holding one is ours (DESIGN
	// §4.5); the rest are released later if they land after the call ends
	// without owning the row (the server's statement may still complete
	// after the client gave up on it).
	var unconfirmed []pendingClaim
	owning := false
	defer func() {
		var notOwned []pendingClaim
		for _, u := range unconfirmed {
			if !owning || u.nonce != ownedNonce {
				notOwned = append(notOwned, u)
			}
		}
		g.releaseLater(p, notOwned)
	}()
	ownPending := func(u pendingClaim, rec Record) (Result, error) {
		owning, ownedNonce = true, u.nonce
		attempt, firstSeen := rec.Attempts, rec.CreatedAt
		return g.own(ctx, p, op, owned{id: rec.ID, nonce: u.nonce, attempt: attempt, firstSeen: firstSeen,
			leaseFrom: u.sent, prev: u.prev}, u.kind)
	}
	// unsure names the last write whose outcome was unknown: the next read
	// settles it (detached from the caller, retried within StoreTimeout).
	var unsure *unknownWrite
	var lastErr error // the last claim write's error, for the caller if the races never end
	needClaim, races := true, 0
	for {
		if races > maxRaces {
			err := errors.New("too many lost races in a row")
			if lastErr != nil {
				err = fmt.Errorf("%w; last store error: %w", err, lastErr)
			}
			return Result{}, &StoreError{Op: "claim", Err: err}
		}
		if g.lifetime.Err() != nil {
			// Closing: claim nothing more (see Close).
			return Result{}, &StoreError{Op: "claim", Err: ErrShuttingDown}
		}
		if ctx.Err() != nil && !p.detach {
			// The caller is gone: claiming now would only be released again.
			return Result{}, &StoreError{Op: "claim", Err: context.Cause(ctx)}
		}
		nonce := newNonce()
		readAt := g.now()
		if needClaim {
			sent := time.Now()
			id, err := g.claim(ctx, p, nonce)
			switch {
			case err == nil:
				owning, ownedNonce = true, nonce
				return g.own(ctx, p, op, owned{id: id, nonce: nonce, attempt: 1, firstSeen: g.now(), leaseFrom: sent}, EventClaimed)
			case !errors.Is(err, ErrDuplicate):
				// Unknown outcome: decide by the row (DESIGN §4.5).
				unconfirmed = append(unconfirmed, pendingClaim{nonce: nonce, sent: sent, kind: EventClaimed})
				unsure = &unknownWrite{op: "claim", err: err}
				lastErr = err
			}
		}
		var rec Record
		var err error
		settled := unsure
		unsure = nil
		if settled != nil {
			rec, err = g.settle(ctx, p, settled.op, settled.err)
		} else {
			rec, err = g.get(ctx, p)
		}
		if settled != nil && !outcomeUnknown(settled.err) && (err == nil || errors.Is(err, ErrNotFound)) {
			if _, ours := pendingIn(unconfirmed, rec); !ours || err != nil {
				// The store answered with an error (no such table or
				// column, a value too long, ...): the write did not apply,
				// and trying again cannot help. The row said so too.
				return Result{}, g.storeErr(ctx, p, settled.op, settled.err)
			}
		}
		if errors.Is(err, ErrNotFound) {
			// Our write did not land (yet), or the row was deleted since
			// (cleanup, or a released claim), or a multi-primary loser read
			// before the winner's commit: claim again, after a pause that
			// grows (longer after an unknown outcome: the store is in
			// trouble).
			needClaim = true
			races++
			step := 5 * time.Millisecond
			if settled != nil {
				step = 50 * time.Millisecond
			}
			sleepCtx(ctx, jitter(min(time.Duration(races)*step, time.Second)))
			continue
		}
		if err != nil {
			return Result{}, g.storeErr(ctx, p, "read", err)
		}
		needClaim = false
		if u, ok := pendingIn(unconfirmed, rec); ok {
			return ownPending(u, rec)
		}

		if rec.Expired() && !(rec.Status == RowStarted && !rec.Stale(p.settings.StaleAfter)) {
			won, u := g.tryReclaim(ctx, p, ReclaimParams{Kind: ReclaimExpired, ID: rec.ID, OldNonce: rec.ClaimNonce,
				OldAttempts: rec.Attempts, NewNonce: nonce, Fingerprint: p.fingerprint,
				TTL: p.settings.TTL, StaleAfter: p.settings.StaleAfter}, nil, EventClaimed)
			if u != nil {
				unconfirmed, unsure, lastErr = append(unconfirmed, u.claim), u, u.err
				races++
				continue
			}
			if won != nil {
				won.attempt, won.firstSeen = 1, g.now()
				owning, ownedNonce = true, won.nonce
				return g.own(ctx, p, op, *won, EventClaimed)
			}
			races++
			continue
		}
		if rec.Fingerprint != p.fingerprint {
			// Only a client key can name a row with other inputs: a derived
			// key hashes the inputs themselves.
			g.emit(Event{Kind: EventMismatch, Scope: p.scope})
			return Result{}, ErrFingerprintMismatch
		}

		switch rec.Status {
		case RowSucceeded:
			res, err := g.replay(ctx, p, rec, readAt)
			if err != nil {
				return Result{}, err
			}
			g.emit(Event{Kind: EventReplayed, Scope: p.scope})
			return res, nil

		case RowFailed:
			env, err := decodeStored(rec)
			if err != nil {
				return Result{}, g.storeErr(ctx, p, "read", err)
			}
			if final(env.StopReason) || rec.Attempts >= p.settings.MaxAttempts {
				if !final(env.StopReason) {
					env.StopReason = sanitize.RetryLimit
				}
				g.emit(Event{Kind: EventRetryLimit, Scope: p.scope, StopReason: env.StopReason})
				return g.storedFailure(p, rec, env), nil
			}
			prev := rec
			won, u := g.tryReclaim(ctx, p, ReclaimParams{Kind: ReclaimFailed, ID: rec.ID, OldNonce: rec.ClaimNonce,
				OldAttempts: rec.Attempts, NewNonce: nonce, TTL: p.settings.TTL, MaxAttempts: p.settings.MaxAttempts}, &prev, EventRetried)
			if u != nil {
				unconfirmed, unsure, lastErr = append(unconfirmed, u.claim), u, u.err
				races++
				continue
			}
			if won != nil {
				won.attempt, won.firstSeen = rec.Attempts+1, rec.CreatedAt
				owning, ownedNonce = true, won.nonce
				return g.own(ctx, p, op, *won, EventRetried)
			}
			races++

		case RowStarted:
			if !rec.Stale(p.settings.StaleAfter) {
				if waitUntil.IsZero() || !g.now().Before(waitUntil) || ctx.Err() != nil {
					g.emit(Event{Kind: EventInProgress, Scope: p.scope})
					return g.inProgress(p, rec), nil
				}
				races = 0
				start := g.now()
				sleepCtx(ctx, min(poll.next(), waitUntil.Sub(start)))
				waited += g.now().Sub(start)
				if ctx.Err() != nil || g.lifetime.Err() != nil { // the caller, or the Guard, stopped waiting
					g.emit(Event{Kind: EventInProgress, Scope: p.scope})
					return g.inProgress(p, rec), nil
				}
				continue
			}
			if p.settings.StalePolicy == StaleFail || rec.Attempts >= p.settings.MaxAttempts {
				reason := sanitize.Abandoned
				if p.settings.StalePolicy != StaleFail {
					reason = sanitize.RetryLimit
				}
				if err := g.abandon(ctx, p, rec, reason); err != nil {
					return Result{}, err
				}
				races++
				continue // the re-read answers with the failed row
			}
			prev := rec
			won, u := g.tryReclaim(ctx, p, ReclaimParams{Kind: ReclaimStale, ID: rec.ID, OldNonce: rec.ClaimNonce,
				OldAttempts: rec.Attempts, NewNonce: nonce, StaleAfter: p.settings.StaleAfter}, &prev, EventTakeover)
			if u != nil {
				unconfirmed, unsure, lastErr = append(unconfirmed, u.claim), u, u.err
				races++
				continue
			}
			if won != nil {
				owning, ownedNonce = true, won.nonce
				g.log.Info("guard: took over a stale claim", g.attrs(p, slog.Int("attempt", rec.Attempts+1),
					slog.Duration("silent_for", rec.Now.Sub(rec.lastSign())))...)
				won.attempt, won.firstSeen = rec.Attempts+1, rec.CreatedAt
				return g.own(ctx, p, op, *won, EventTakeover)
			}
			races++

		default:
			return Result{}, g.storeErr(ctx, p, "read", fmt.Errorf("unknown row status %q", rec.Status))
		}
	}
}

// final reports whether a stored failure is never retried: the inputs were
// rejected, the operation was abandoned, or it ran out of attempts.
func final(r sanitize.StopReason) bool {
	return r == sanitize.Abandoned || r == sanitize.RetryLimit || r == sanitize.InvalidInput
}

// owned is a claim this call holds.
type owned struct {
	id        uint64
	nonce     string
	attempt   int
	firstSeen time.Time
	// leaseFrom is when the write that took the claim was sent (local
	// monotonic clock): the lease's first beat (DESIGN §4.7).
	leaseFrom time.Time
	// prev is the row before a Reclaim took it (nil after a Claim or an
	// expired re-claim), for Release.
	prev *Record
}

// own starts the operation on a claim this call took, unless nothing may
// run any more: the Guard is closing, or the caller hung up (without
// Detach). Then the claim is released, since the caller is told that
// nothing ran. A lease already half spent (the claim's outcome had to be
// settled by re-reading) is renewed before the operation starts.
func (g *Guard) own(ctx context.Context, p prepared, op Operation, o owned, kind EventKind) (Result, error) {
	switch {
	case g.lifetime.Err() != nil:
		g.release(p, o)
		return Result{}, &StoreError{Op: "claim", Err: ErrShuttingDown}
	case ctx.Err() != nil && !p.detach:
		g.release(p, o)
		return Result{}, &StoreError{Op: "claim", Err: context.Cause(ctx)}
	}
	if time.Since(o.leaseFrom) > p.settings.StaleAfter/2 {
		began := time.Now()
		sctx, cancel := g.storeCtx(context.WithoutCancel(ctx))
		ok, err := g.store.Heartbeat(sctx, o.id, o.nonce)
		cancel()
		if err == nil && !ok {
			// Taken over while this call settled its claim: nothing
			// ran here, and the row says what the caller gets.
			if res, answered := g.answerFromRow(ctx, p); answered {
				return res, nil
			}
			err = ErrOwnershipLost
		}
		if err != nil {
			g.release(p, o)
			return Result{}, g.storeErr(ctx, p, "heartbeat", err)
		}
		o.leaseFrom = began
	}
	g.emit(Event{Kind: kind, Scope: p.scope})
	return g.runOwned(ctx, p, op, o)
}

// answerFromRow answers a call whose claim another caller took: in progress
// while that caller runs, else the stored answer. false when the row cannot
// be read or names other inputs.
func (g *Guard) answerFromRow(ctx context.Context, p prepared) (Result, bool) {
	readAt := g.now()
	rec, err := g.get(ctx, p)
	if err != nil || rec.Fingerprint != p.fingerprint {
		return Result{}, false
	}
	switch rec.Status {
	case RowStarted:
		g.emit(Event{Kind: EventInProgress, Scope: p.scope})
		return g.inProgress(p, rec), true
	case RowSucceeded:
		if res, err := g.replay(ctx, p, rec, readAt); err == nil {
			g.emit(Event{Kind: EventReplayed, Scope: p.scope})
			return res, true
		}
	case RowFailed:
		if env, err := decodeStored(rec); err == nil {
			return g.storedFailure(p, rec, env), true
		}
	}
	return Result{}, false
}

func (g *Guard) runOwned(ctx context.Context, p prepared, op Operation, o owned) (Result, error) {
	parent := ctx
	if p.detach {
		parent = context.WithoutCancel(ctx)
	}
	opCtx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	stopOnClose := context.AfterFunc(g.lifetime, func() { cancel(ErrShuttingDown) })
	defer stopOnClose()
	runCtx := opCtx
	if p.timeout > 0 {
		var cancelTimeout context.CancelFunc
		runCtx, cancelTimeout = context.WithTimeout(opCtx, p.timeout)
		defer cancelTimeout()
	}

	hb := g.startHeartbeat(p, o, cancel)
	defer hb.stop()
	start := g.now()
	value, opErr := callOperation(runCtx, op)
	elapsed := g.now().Sub(start)

	res := Result{Attempt: o.attempt, FirstSeen: o.firstSeen, KeyHash: p.keyHash}
	env, code := sanitize.Envelope{}, 0
	// invalid is a programming error of the operation (DESIGN §5: never
	// provider_error): a result that is not a JSON object, or an error the
	// operation itself marked ErrInvalidResult.
	var invalid error
	switch {
	case opErr == nil:
		var dropped []string
		var err error
		env, code, err = toEnvelope(value, func(name string) { dropped = append(dropped, name) })
		if err != nil {
			invalid = fmt.Errorf("%w: %w", ErrInvalidResult, err)
		}
		g.reportDropped(p, dropped)
	case errors.Is(opErr, ErrInvalidResult):
		invalid, opErr = opErr, nil
	}
	status := RowSucceeded
	switch {
	case invalid != nil:
		status = RowFailed
		env, code = sanitize.Failure(sanitize.Unknown), http.StatusInternalServerError
		res.Err = invalid
		g.log.Error("guard: the operation's result is invalid (a programming error, not an upstream failure); stored as failed with stop reason unknown",
			g.attrs(p, slog.Int("attempt", o.attempt), slog.String("value_type", fmt.Sprintf("%T", value)), slog.Any("err", invalid))...)
	case opErr != nil:
		status = RowFailed
		reason := g.classify(p, runCtx, opErr)
		env, code = sanitize.Failure(reason), http.StatusBadGateway
		if reason == sanitize.InvalidInput {
			// The upstream rejected the inputs themselves: final for them.
			code = http.StatusUnprocessableEntity
		}
		res.Err = opErr
		g.logOpError(p, o, opErr, reason)
	}
	g.emit(Event{Kind: EventOperation, Scope: p.scope, Duration: elapsed, StopReason: env.StopReason, Failed: status == RowFailed})

	body, dropped, err := g.encode(env)
	if err != nil {
		// Unreachable for a sanitized envelope; store a bare failure rather than nothing.
		g.log.Error("guard: encoding the envelope failed", g.attrs(p, slog.Any("err", err))...)
		env, code, status = sanitize.Failure(sanitize.Unknown), http.StatusBadGateway, RowFailed
		body, _ = sanitize.Marshal(env)
	}
	if dropped {
		g.log.Warn("guard: envelope over the size limit; data dropped", g.attrs(p, slog.Int("limit_bytes", g.policy.MaxBytes))...)
		if env, err = sanitize.FromJSON(body); err != nil {
			env = sanitize.Failure(sanitize.Unknown)
		}
	}
	res.Envelope, res.Body, res.StatusCode, res.StopReason = env, body, code, env.StopReason
	res.Status = StatusSucceeded
	if status == RowFailed {
		res.Status = StatusFailed
	}

	if hb.takenOver() {
		// Another caller owns the row now; writing would overwrite its state.
		res.LostClaim = true
		g.emit(Event{Kind: EventLostClaim, Scope: p.scope})
		g.log.Warn("guard: claim lost while running; result not stored", g.attrs(p, slog.Int("attempt", o.attempt))...)
		return res, invalid
	}
	// The heartbeat keeps running: the commit is retried while the lease holds.
	committing := g.now()
	committed, completedAt, err := g.complete(ctx, p, hb, CompleteParams{ID: o.id, Nonce: o.nonce, Status: status,
		Response: body, ResponseCode: code, TTL: p.settings.TTL})
	switch {
	case err != nil:
		// The caller paid for this answer, so it gets it; the row stays
		// started and will be taken over once stale.
		g.log.Error("guard: storing the result failed; it will not be replayed", g.attrs(p, slog.Any("err", err))...)
	case !committed:
		res.LostClaim = true
		g.emit(Event{Kind: EventLostClaim, Scope: p.scope})
		g.log.Warn("guard: claim taken over before commit; result not stored", g.attrs(p, slog.Int("attempt", o.attempt))...)
	default:
		// The store's completed_at, so a replay from memory says what one
		// read from the store says. The entry's lifetime is counted from
		// before the commit was sent: the row expires TTL after it landed.
		res.CompletedAt = completedAt
		if status == RowSucceeded && g.cache != nil { // replayOf encodes: not for a disabled cache
			g.cache.put(p.tenant, p.scope, p.keyHash, p.fingerprint, replayOf(res),
				committing.Add(min(g.cfg.ReplayCacheMaxAge, p.settings.TTL)))
		}
	}
	return res, invalid
}

// replayOf turns a fresh result into what a replay of it answers.
func replayOf(r Result) Result {
	r.Envelope.Cached = true
	body, err := sanitize.Marshal(r.Envelope)
	if err != nil {
		return Result{}
	}
	r.Body, r.Cached, r.Err, r.LostClaim = body, true, nil, false
	return r
}

// encode is g.policy.EncodeReport(env) for an envelope that is already
// sanitized, as every envelope here is (it comes from sanitize.FromValue or
// sanitize.Failure): EncodeReport marshals, sanitizes the encoding again and
// marshals once more, and for a sanitized envelope that gives exactly
// Marshal(env) (sanitize's fuzz test holds FromJSON(Marshal(e)) == e). So one
// Marshal is enough while the envelope fits the size limit; over it,
// EncodeReport applies the size policy as before.
func (g *Guard) encode(env sanitize.Envelope) ([]byte, bool, error) {
	env.Cached = false
	if body, err := sanitize.Marshal(env); err == nil && len(body) <= g.policy.MaxBytes {
		return body, false, nil
	}
	return g.policy.EncodeReport(env)
}

// emptyObject is what a nil result stands for: a success without data.
var emptyObject = json.RawMessage(`{}`)

// toEnvelope sanitizes an operation's value, calling dropped with the name
// of each field the allowlist drops. nil, a nil pointer and a nil map mean a
// success without data; any other value that is not a JSON object is an
// error (ErrInvalidResult for the caller).
func toEnvelope(v any, dropped func(string)) (sanitize.Envelope, int, error) {
	code := http.StatusOK
	switch r := v.(type) {
	case Response:
		code, v = cmp.Or(r.StatusCode, http.StatusOK), r.Value
	case *Response:
		if r != nil {
			code, v = cmp.Or(r.StatusCode, http.StatusOK), r.Value
		}
	}
	if code < 100 || code > 599 {
		return sanitize.Envelope{}, 0, fmt.Errorf("status code %d out of range", code)
	}
	if v == nil {
		v = emptyObject
	} else if rv := reflect.ValueOf(v); (rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Map) && rv.IsNil() {
		v = emptyObject
	}
	env, err := sanitize.FromValueReport(v, dropped)
	if errors.Is(err, sanitize.ErrNotObject) {
		err = fmt.Errorf("a %T is not a JSON object; return a struct, a map or a sanitize.Envelope", v)
	}
	return env, code, err
}

func (g *Guard) classify(p prepared, ctx context.Context, err error) sanitize.StopReason {
	var sr stopReasoner
	var pe *PanicError
	cause := context.Cause(ctx)
	switch {
	case errors.As(err, &sr):
		return sanitize.ParseStopReason(string(sr.StopReason()))
	case errors.As(err, &pe):
		return sanitize.Unknown
	case errors.Is(cause, ErrShuttingDown), errors.Is(cause, ErrOwnershipLost):
		// Cut off by Close, or by its own lease running out: the operation
		// may have done part of its work.
		if p.settings.StalePolicy == StaleFail {
			return sanitize.Abandoned
		}
		return sanitize.Timeout
	case errors.Is(err, context.DeadlineExceeded), errors.Is(cause, context.DeadlineExceeded):
		return sanitize.Timeout
	}
	return sanitize.ProviderError
}

func (g *Guard) logOpError(p prepared, o owned, err error, reason sanitize.StopReason) {
	var pe *PanicError
	if errors.As(err, &pe) {
		// The panic value may hold user data: log its type and the stack only.
		g.log.Error("guard: operation panicked", g.attrs(p, slog.Int("attempt", o.attempt),
			slog.String("panic_type", fmt.Sprintf("%T", pe.Value)), slog.String("stack", string(pe.Stack)))...)
		return
	}
	g.log.Warn("guard: operation failed", g.attrs(p, slog.Int("attempt", o.attempt),
		slog.String("stop_reason", string(reason)), slog.String("err_type", fmt.Sprintf("%T", err)))...)
}

func callOperation(ctx context.Context, op Operation) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return op(ctx)
}

// replay answers a succeeded row. readAt is the local time taken before the
// read, so the cache entry's lifetime (the row's remaining TTL on the
// database's clock) is counted from before the read, never after it.
func (g *Guard) replay(ctx context.Context, p prepared, rec Record, readAt time.Time) (Result, error) {
	env, err := decodeStored(rec)
	if err != nil {
		return Result{}, g.storeErr(ctx, p, "read", err)
	}
	env.Cached = true
	body, err := sanitize.Marshal(env)
	if err != nil {
		return Result{}, g.storeErr(ctx, p, "read", err)
	}
	res := Result{Status: StatusSucceeded, Envelope: env, Body: body, StatusCode: cmp.Or(rec.ResponseCode, http.StatusOK),
		Cached: true, StopReason: env.StopReason, Attempt: rec.Attempts, FirstSeen: rec.CreatedAt,
		CompletedAt: rec.CompletedAt, KeyHash: p.keyHash}
	if left := rec.ExpiresAt.Sub(rec.Now); left > 0 {
		g.cache.put(p.tenant, p.scope, p.keyHash, p.fingerprint, res, readAt.Add(min(left, g.cfg.ReplayCacheMaxAge)))
	}
	return res, nil
}

func (g *Guard) storedFailure(p prepared, rec Record, env sanitize.Envelope) Result {
	env.OK, env.Cached = false, true
	body, err := sanitize.Marshal(env)
	if err != nil {
		body = nil
	}
	return Result{Status: StatusFailed, Envelope: env, Body: body, StatusCode: cmp.Or(rec.ResponseCode, http.StatusBadGateway),
		Cached: true, StopReason: env.StopReason, Attempt: rec.Attempts, FirstSeen: rec.CreatedAt,
		CompletedAt: rec.CompletedAt, KeyHash: p.keyHash}
}

func (g *Guard) inProgress(p prepared, rec Record) Result {
	env := sanitize.Failure(sanitize.InProgress)
	body, _ := sanitize.Marshal(env)
	return Result{Status: StatusInProgress, Envelope: env, Body: body, StatusCode: http.StatusConflict,
		StopReason: sanitize.InProgress, Attempt: rec.Attempts, FirstSeen: rec.CreatedAt, KeyHash: p.keyHash}
}

func decodeStored(rec Record) (sanitize.Envelope, error) {
	if len(rec.Response) == 0 {
		return sanitize.Envelope{}, fmt.Errorf("%s row %d has no stored response", rec.Status, rec.ID)
	}
	env, err := sanitize.FromJSON(rec.Response)
	if err != nil {
		return sanitize.Envelope{}, fmt.Errorf("stored response of row %d: %w", rec.ID, err)
	}
	return env, nil
}

// Store calls. Each is bounded by StoreTimeout. Every write runs detached
// from the caller's cancellation: a write whose caller hung up may still
// land, and then only a re-read of the row can tell what happened
// (DESIGN §4.5). Reads follow the caller's context, except those that
// settle a write's outcome.

func (g *Guard) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.cfg.StoreTimeout)
}

func (g *Guard) claim(ctx context.Context, p prepared, nonce string) (uint64, error) {
	ctx, cancel := g.storeCtx(context.WithoutCancel(ctx))
	defer cancel()
	return g.store.Claim(ctx, ClaimParams{Tenant: p.tenant, Scope: p.scope, KeyHash: p.keyHash,
		Fingerprint: p.fingerprint, Nonce: nonce, TTL: p.settings.TTL, Lease: p.settings.StaleAfter})
}

func (g *Guard) get(ctx context.Context, p prepared) (Record, error) {
	ctx, cancel := g.storeCtx(ctx)
	defer cancel()
	return g.store.Get(ctx, p.tenant, p.scope, p.keyHash)
}

// settle resolves a write whose outcome is unknown by re-reading the row,
// detached from the caller and bounded by StoreTimeout in all, with
// jittered pauses. ErrNotFound when there is no row. Any other error means
// the row could not be read either: the caller is told nothing ran.
func (g *Guard) settle(ctx context.Context, p prepared, op string, cause error) (Record, error) {
	ctx = context.WithoutCancel(ctx)
	deadline := time.Now().Add(g.cfg.StoreTimeout)
	pause := 20 * time.Millisecond
	for {
		sctx, cancel := context.WithDeadline(ctx, deadline)
		rec, err := g.store.Get(sctx, p.tenant, p.scope, p.keyHash)
		cancel()
		if err == nil || errors.Is(err, ErrNotFound) {
			return rec, err
		}
		if time.Until(deadline) < pause {
			return Record{}, g.storeErr(ctx, p, op, cause)
		}
		sleepCtx(ctx, jitter(pause))
		pause = min(2*pause, time.Second)
	}
}

// outcomeUnknown reports whether a failed write may have applied: the store
// says so (ErrOutcomeUnknown), or no answer came (a timeout, a broken
// connection). Any other error is the store's answer that the statement
// failed.
func outcomeUnknown(err error) bool {
	var ne net.Error
	return errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne)
}

// pendingClaim is a claim write (INSERT or guarded UPDATE) whose outcome
// was unknown: it may have landed, or may land later.
type pendingClaim struct {
	nonce string
	// guard is the nonce a Reclaim's UPDATE is guarded by ("" for a Claim's
	// INSERT): once the row holds neither it nor nonce, the UPDATE can
	// never land.
	guard string
	prev  *Record   // the row before a Reclaim, for Release
	sent  time.Time // when the write was sent: the earliest its lease can count from
	kind  EventKind // what owning it means
	// landed: the write is known to have landed (a release that failed).
	landed bool
}

// unknownWrite is a claim write whose outcome the next read settles.
type unknownWrite struct {
	op    string
	err   error
	claim pendingClaim
}

// pendingIn returns the unconfirmed claim rec holds, if any.
func pendingIn(unconfirmed []pendingClaim, rec Record) (pendingClaim, bool) {
	if rec.Status != RowStarted {
		return pendingClaim{}, false
	}
	for _, u := range unconfirmed {
		if rec.ClaimNonce == u.nonce {
			return u, true
		}
	}
	return pendingClaim{}, false
}

// tryReclaim makes the guarded transition rp and, when it won, returns the
// claim it holds. An unknown outcome is returned as u: the caller keeps the
// claim among its unconfirmed ones and settles it by re-reading the row
// (DESIGN §4.5). prev is the row as read, for Release.
func (g *Guard) tryReclaim(ctx context.Context, p prepared, rp ReclaimParams, prev *Record, kind EventKind) (won *owned, u *unknownWrite) {
	rp.Lease = p.settings.StaleAfter
	sent := time.Now()
	sctx, cancel := g.storeCtx(context.WithoutCancel(ctx))
	ok, err := g.store.Reclaim(sctx, rp)
	cancel()
	switch {
	case err != nil:
		return nil, &unknownWrite{op: "reclaim " + rp.Kind.String(), err: err,
			claim: pendingClaim{nonce: rp.NewNonce, guard: rp.OldNonce, prev: prev, sent: sent, kind: kind}}
	case ok:
		return &owned{id: rp.ID, nonce: rp.NewNonce, leaseFrom: sent, prev: prev}, nil
	}
	return nil, nil
}

func (g *Guard) abandon(ctx context.Context, p prepared, rec Record, reason sanitize.StopReason) error {
	body, err := sanitize.Marshal(sanitize.Failure(reason))
	if err != nil {
		return g.storeErr(ctx, p, "abandon", err)
	}
	ctx, cancel := g.storeCtx(context.WithoutCancel(ctx))
	defer cancel()
	won, err := g.store.Abandon(ctx, AbandonParams{ID: rec.ID, OldNonce: rec.ClaimNonce, OldAttempts: rec.Attempts,
		StaleAfter: p.settings.StaleAfter, Response: body, ResponseCode: http.StatusBadGateway, TTL: p.settings.TTL})
	if err != nil {
		// Unknown outcome: the caller's next read of the row decides. A
		// store that is down fails that read.
		g.emit(Event{Kind: EventStoreError, Scope: p.scope, StoreOp: "abandon"})
		g.log.Warn("guard: abandoning a stale claim failed; re-reading", g.attrs(p, slog.Any("err", err))...)
		return nil
	}
	if won {
		g.emit(Event{Kind: EventAbandoned, Scope: p.scope, StopReason: reason})
		g.log.Warn("guard: stale claim marked failed instead of taken over", g.attrs(p,
			slog.String("stop_reason", string(reason)), slog.Int("attempt", rec.Attempts))...)
	}
	return nil
}

// release gives back a claim whose operation never ran (DESIGN §4.5): the
// row goes back to where it was before the claim (absent, stale or failed),
// so no attempt is burnt and nothing is marked abandoned. If the store
// cannot be told now, it is told later.
func (g *Guard) release(p prepared, o owned) {
	ctx, cancel := g.storeCtx(context.Background())
	defer cancel()
	if _, err := g.store.Release(ctx, ReleaseParams{ID: o.id, Nonce: o.nonce, Prev: o.prev}); err != nil {
		g.releaseLater(p, []pendingClaim{{nonce: o.nonce, prev: o.prev, sent: o.leaseFrom, landed: true}})
	}
}

// landWindow is how long after it was sent a claim write whose outcome was
// unknown may still land: the server goes on with a statement whose client
// gave up (an INSERT waiting on a row lock waits up to
// innodb_lock_wait_timeout, 50s by default).
const landWindow = time.Minute

// releaseLater keeps looking, in the background, for the claims us that
// this call does not own (its caller was told nothing ran, or got another
// answer), and releases each one that turns up. They all name the call's
// one row, so one read per round serves them all. It stops once the row
// shows none of them can be there any more (see settledFor), when the
// Guard closes (after one last try), or after releaseLaterFor (at most the
// key's TTL) from the first: it outlasts a claim's lease on purpose, since
// under policy fail a stale orphan claim would otherwise be marked
// abandoned though nothing ran.
func (g *Guard) releaseLater(p prepared, us []pendingClaim) {
	if len(us) == 0 {
		return // the common case, without startRelease's copy of p to the heap
	}
	g.startRelease(p, us)
}

func (g *Guard) startRelease(p prepared, us []pendingClaim) {
	g.background.Add(1)
	go func() {
		defer g.background.Done()
		deadline := us[0].sent.Add(min(p.settings.TTL, max(10*p.settings.StaleAfter, releaseLaterFor)))
		pause := 50 * time.Millisecond
		for {
			us = g.releaseIfMine(p, us)
			if len(us) == 0 || !time.Now().Before(deadline) || g.lifetime.Err() != nil {
				return
			}
			sleepCtx(g.lifetime, min(jitter(pause), time.Until(deadline)))
			pause = min(2*pause, time.Second)
		}
	}()
}

// releaseIfMine reads the row, releases the claim of us it holds, if any,
// and returns the claims still unsettled.
func (g *Guard) releaseIfMine(p prepared, us []pendingClaim) []pendingClaim {
	ctx, cancel := g.storeCtx(context.Background())
	defer cancel()
	rec, err := g.store.Get(ctx, p.tenant, p.scope, p.keyHash)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return us
	}
	found := err == nil
	left := us[:0]
	for _, u := range us {
		switch {
		case found && rec.Status == RowStarted && rec.ClaimNonce == u.nonce:
			if _, err := g.store.Release(ctx, ReleaseParams{ID: rec.ID, Nonce: u.nonce, Prev: u.prev}); err != nil {
				left = append(left, u)
				continue
			}
			g.log.Warn("guard: released a claim whose write landed after its call had answered without it", g.attrs(p)...)
		case !u.settledFor(rec, found):
			left = append(left, u)
		}
	}
	return left
}

// settledFor reports whether the row as read (found false: absent) shows
// that u is not there and can no longer land: its write is known to have
// landed, or landWindow has passed since it was sent, or it was a Reclaim
// whose guard nonce the row no longer holds.
func (u pendingClaim) settledFor(rec Record, found bool) bool {
	if found && rec.ClaimNonce == u.nonce {
		return rec.Status != RowStarted
	}
	if u.landed || time.Since(u.sent) >= landWindow {
		return true
	}
	return found && u.guard != "" && rec.ClaimNonce != u.guard
}

// complete writes the outcome while the lease holds, with the heartbeat
// still renewing it. Every attempt that does not report success, whether it
// changed no row or its outcome is unknown (a lost reply, a timeout, error
// 1213), is settled by re-reading the row: our nonce with our outcome means
// the commit landed; our nonce still started means try again; anything else
// means the claim was lost. completedAt is the completion time the store
// wrote (its clock).
func (g *Guard) complete(ctx context.Context, p prepared, hb *heartbeat, cp CompleteParams) (committed bool, completedAt time.Time, err error) {
	ctx = context.WithoutCancel(ctx)
	pause := 50 * time.Millisecond
	// Heartbeats that land keep renewing the lease, so a statement that
	// fails for good (while the row is readable) is also bounded by one
	// lease length.
	giveUp := time.Now().Add(p.settings.StaleAfter)
	var lastErr error
	for try := 0; ; try++ {
		sctx, cancel := g.storeCtx(ctx)
		ok, at, err := g.store.Complete(sctx, cp)
		cancel()
		if err == nil && ok {
			return true, at, nil
		}
		if err != nil {
			lastErr = err
			g.emit(Event{Kind: EventStoreError, Scope: p.scope, StoreOp: "commit"})
			g.log.Warn("guard: commit failed; re-reading the row", g.attrs(p, slog.Any("err", err))...)
		}
		sctx, cancel = g.storeCtx(ctx)
		rec, rerr := g.store.Get(sctx, p.tenant, p.scope, p.keyHash)
		cancel()
		switch {
		case errors.Is(rerr, ErrNotFound):
			return false, time.Time{}, nil
		case rerr != nil:
			lastErr = rerr
		case rec.ID != cp.ID || rec.ClaimNonce != cp.Nonce:
			return false, time.Time{}, nil
		case rec.Status != RowStarted:
			if rec.Status == cp.Status && rec.ResponseCode == cp.ResponseCode && sameJSON(rec.Response, cp.Response) {
				return true, rec.CompletedAt, nil
			}
			return false, time.Time{}, nil // abandoned by another caller
		}
		// A closing Guard does not wait out the lease: its caller gets
		// the answer before the process exits.
		if (hb.left() <= 0 || time.Now().After(giveUp) || g.lifetime.Err() != nil) && try > 0 {
			if lastErr == nil {
				lastErr = errors.New("lease ran out")
			}
			return false, time.Time{}, g.storeErr(ctx, p, "commit", lastErr)
		}
		sleepCtx(ctx, min(jitter(pause), max(hb.left(), time.Millisecond)))
		pause = min(2*pause, time.Second)
	}
}

// sameJSON reports whether two JSON documents are equal as values (MySQL
// normalises a JSON column's formatting and key order).
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

func (g *Guard) storeErr(ctx context.Context, p prepared, op string, err error) error {
	var se *StoreError
	if errors.As(err, &se) {
		return err
	}
	if ctx.Err() != nil {
		// The caller gave up; not the store's failure, so no alarm.
		return &StoreError{Op: op, Err: err}
	}
	g.emit(Event{Kind: EventStoreError, Scope: p.scope, StoreOp: op})
	g.log.Error("guard: store call failed", g.attrs(p, slog.String("op", op), slog.Any("err", err))...)
	return &StoreError{Op: op, Err: err}
}

// emit reports e to Config.Observe. An observer that panics never breaks
// the protocol (a claim left started would run the operation again after
// staleAfter): the panic is recovered and logged once per event kind.
func (g *Guard) emit(e Event) {
	if g.cfg.Observe == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			if _, logged := g.observerPanics.LoadOrStore(e.Kind, true); !logged {
				g.log.Error("guard: Config.Observe panicked; the event is lost, the call goes on (logged once per event kind)",
					slog.String("event", string(e.Kind)), slog.String("scope", e.Scope),
					slog.String("panic_type", fmt.Sprintf("%T", r)), slog.String("stack", string(debug.Stack())))
			}
		}
	}()
	g.cfg.Observe(e)
}

// attrs are the identifying log attributes of a call: never the client key
// or inputs, and only a prefix of the key hash.
func (g *Guard) attrs(p prepared, extra ...any) []any {
	return append([]any{slog.String("tenant", p.tenant), slog.String("scope", p.scope),
		slog.String("key_hash", ShortHash(p.keyHash))}, extra...)
}

// ShortHash is the prefix of a key hash that logs carry.
func ShortHash(h string) string { return h[:min(12, len(h))] }

func newNonce() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// backoff yields polling intervals for a bounded wait: from 20ms, growing by
// half each time, capped at a quarter of staleAfter and at one second.
type backoff struct {
	cur, max time.Duration
}

func newBackoff(staleAfter time.Duration) *backoff {
	return &backoff{cur: 20 * time.Millisecond, max: min(time.Second, max(staleAfter/4, 20*time.Millisecond))}
}

func (b *backoff) next() time.Duration {
	d := jitter(b.cur)
	b.cur = min(b.cur+b.cur/2, b.max)
	return d
}

// WithIdempotency is Do.
//
// Deprecated: use Do; WithIdempotency remains for one release.
func (g *Guard) WithIdempotency(ctx context.Context, call Call, op Operation) (Result, error) {
	return g.Do(ctx, call, op)
}

// HashUserText is what Call.Inputs hold in place of raw user text: the hex
// SHA-256 of s trimmed, with every run of white space collapsed to one
// space. Raw text never enters a key, a fingerprint, the store or a log.
func HashUserText(s string) string { return keys.HashUserText(s) }
