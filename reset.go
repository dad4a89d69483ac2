package idemguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemguard/idemguard/internal/testhooks"
	"github.com/idemguard/idemguard/store"
)

// resetFence bounds how long an answer of a scope that allows resets
// (Settings.AllowReset) may be served from what one read saw: a replay
// cache entry lives at most this long, a replay from a read is answered
// only within it of the read's start, and a reset or a forced run answers
// only once it has passed since its write landed. See "Reset and forced
// runs" in protocol.go.
const resetFence = time.Second

// The kinds of the events a reset and a forced run report to Config.Observe
// (the metric of resets by scope). They are not Watch transitions.
const (
	eventReset  EventKind = "reset"
	eventForced EventKind = "forced"
)

// Reset ends the life of a finished key's stored answer (succeeded or
// failed), so that the next call with the key runs the operation afresh,
// as attempt 1 of a new life; no replay of the old answer is served, by
// any process, once Reset has returned. It returns the key as it was.
//
// s are the scope's settings (zero fields take Config.Defaults): the scope
// must allow resets (Settings.AllowReset), else store.ErrResetForbidden.
// It returns ErrNotFound for an absent or expired key (or another
// tenant's), store.ErrKeyRunning for a running key (cancel it first), and
// a *StoreError when the store cannot be reached; in each case nothing
// changed. The audit trail records a durable reset event, with the
// context's actor (WithActor) and the attempt it ended, atomically with
// the row change. Reset waits about a second before it answers (the
// replay caches of every process let go of the old answer meanwhile).
func (g *Guard) Reset(ctx context.Context, key Key, s Settings) (KeyInfo, error) {
	if err := key.check(); err != nil {
		return KeyInfo{}, err
	}
	if err := s.Validate(); err != nil {
		return KeyInfo{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	actor := ActorFrom(ctx)
	if err := validActor(actor); err != nil {
		return KeyInfo{}, fmt.Errorf("%w: the context's actor (WithActor): %w", ErrInvalidInput, err)
	}
	p := prepared{tenant: string(key.tenant), scope: key.scope, keyHash: key.hash, actor: actor,
		settings: s.withDefaults(g.cfg.Defaults)}
	if !p.settings.AllowReset {
		return KeyInfo{}, store.ErrResetForbidden
	}
	if key.clientKey != "" && len(g.previous) > 0 { // the key's row may have been made under a previous secret (secrets.go)
		var err error
		if p.keyHash, err = g.lookupHashAny(ctx, key); err != nil {
			return KeyInfo{}, err
		}
	}
	sent := map[string]*store.AuditEvent{} // the resets whose outcome was unknown, by nonce
	for range maxRaces {
		rec, err := g.get(ctx, p)
		if a, landed := sent[rec.ClaimNonce]; err == nil && landed {
			g.landed(a)
			return g.wasReset(p, rec) // an earlier try landed after all
		}
		switch {
		case errors.Is(err, ErrNotFound):
			return KeyInfo{}, ErrNotFound
		case err != nil:
			return KeyInfo{}, &StoreError{Op: "reset", Err: err}
		case rec.Reclaimable(p.settings.StaleAfter):
			return KeyInfo{}, ErrNotFound
		case rec.Status == store.RowStarted:
			return KeyInfo{}, store.ErrKeyRunning
		}
		nonce := newNonce()
		audit := g.newAudit(p, store.AuditReset, rec.KeyHash, rec.Attempts, rec.Now)
		sctx, cancel := g.storeCtx(context.WithoutCancel(ctx))
		ok, err := g.store.Reset(sctx, store.ResetParams{ID: rec.ID, OldNonce: rec.ClaimNonce, OldAttempts: rec.Attempts,
			NewNonce: nonce, Audit: g.stored(audit)})
		cancel()
		switch {
		case err == nil && ok:
			g.landed(audit)
			return g.wasReset(p, rec)
		case err != nil && !outcomeUnknown(err):
			return KeyInfo{}, &StoreError{Op: "reset", Err: err}
		case err != nil:
			sent[nonce] = audit
		}
		// Another writer changed the row meanwhile, or the outcome is
		// unknown: the row says which.
	}
	return KeyInfo{}, &StoreError{Op: "reset", Err: errors.New("too many lost races in a row")}
}

// wasReset reports the reset of rec's key and answers once the fence has
// passed: from then on no process replays the old answer.
func (g *Guard) wasReset(p prepared, rec store.Record) (KeyInfo, error) {
	g.cache.drop(p.tenant, p.scope, p.keyHash)
	g.emit(Event{Kind: eventReset, Tenant: p.tenant, Scope: p.scope})
	g.log.Info("guard: key reset", slog.String("tenant", p.tenant), slog.String("scope", p.scope),
		slog.String("key_hash", shortHash(p.keyHash)), slog.Int("attempt", rec.Attempts))
	waitFence(time.Now())
	info, err := keyInfoOf(p.keyHash, rec, p.settings.StaleAfter)
	if err != nil {
		return KeyInfo{}, &StoreError{Op: "reset", Err: err}
	}
	return info, nil
}

// waitFence returns once resetFence has passed since landed, a local time
// taken after the write that changed the row had landed. It does not
// listen to the caller: the write landed, and its answer must not come
// before the fence, whoever is still there to get it.
func waitFence(landed time.Time) {
	if d := time.Until(landed.Add(resetFence)); d > 0 {
		time.Sleep(d)
	}
}

// forcing fits p to a call with Call.ForceNew: allowed by the scope, no
// stream to resume; the replay cache and the read before the claim are
// skipped (they would answer the stored answer), and a running key is
// answered at once.
func forcing(p *prepared, c Call) error {
	if c.LastEventID != "" {
		return fmt.Errorf("%w: ForceNew runs the key again; it does not resume a stream (LastEventID)", ErrInvalidInput)
	}
	if !p.settings.AllowReset {
		return store.ErrResetForbidden
	}
	p.force, p.noCache, p.noReadFirst, p.wait = true, true, true, 0
	return nil
}

// replaceable reports whether a forced call may replace rec's answer: it
// is finished, and it was stored before the call began. An answer stored
// since was made by a run concurrent with this call (another forced call
// that won, or the first run of a key absent when the call began): the
// call is answered as its duplicate. The call's beginning on the store's
// clock is taken as rec.Now less the time the call has taken so far,
// which is never later than it was.
func (l *claimLoop) replaceable(rec store.Record) bool {
	return rec.Status != store.RowStarted && rec.CompletedAt.Before(rec.Now.Add(-time.Since(l.began)))
}

// forced runs a finished row again (Call.ForceNew): the guarded takeover
// of the row as read, attempt + 1. A call forces at most the first row it
// reads, and only an answer stored before it began (replaceable); lost,
// it reads again and is answered as a duplicate of the run that won.
func (l *claimLoop) forced(rec store.Record) (Result, error) {
	g, p := l.g, l.p
	prev := rec
	return l.reclaim(store.ReclaimParams{Kind: store.ReclaimForced, ID: rec.ID, OldNonce: rec.ClaimNonce,
		OldAttempts: rec.Attempts, NewNonce: l.nonce, TTL: p.settings.TTL,
		Audit: g.newAudit(p, store.AuditForced, rec.KeyHash, rec.Attempts+1, rec.Now)},
		&prev, EventClaimed, rec.Attempts+1, rec.CreatedAt)
}

// ownForced runs the forced claim o: the old answer leaves this process's
// cache, the fence passes before the operation starts (so that nothing,
// not a stream's first byte nor an Accepted, is answered before it), and
// the answer says what it replaced.
func (l *claimLoop) ownForced(o owned, kind EventKind) (Result, error) {
	g, p := l.g, l.p
	g.cache.drop(p.tenant, p.scope, p.keyHash)
	g.emit(Event{Kind: eventForced, Tenant: p.tenant, Scope: p.scope})
	waitFence(time.Now())
	res, err := g.own(l.ctx, p, o, kind)
	if err == nil && !res.Cached && res.Attempt == o.attempt {
		res.Forced, res.Replaced = true, o.replaced
	}
	return res, err
}

// fresh reports whether a row read at readAt (the local time before the
// read) may still answer p's call with its stored answer: always, unless
// the scope allows resets; then only within resetFence of the read.
func (g *Guard) fresh(p prepared, readAt time.Time) bool {
	return !p.settings.AllowReset || g.cfg.test.Defect == testhooks.DefectStaleCache || g.now().Sub(readAt) < resetFence
}

// cacheAge is how long a replay cache entry of p's scope may live.
func (g *Guard) cacheAge(p prepared) time.Duration {
	if p.settings.AllowReset && g.cfg.test.Defect != testhooks.DefectStaleCache {
		return min(g.cfg.ReplayCacheMaxAge, resetFence)
	}
	return g.cfg.ReplayCacheMaxAge
}
