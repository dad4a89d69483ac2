package idemguard

import (
	"context"
	"errors"
	"time"

	"github.com/idemguard/idemguard/store"
)

// releaseLaterFor is how long, at least, a Guard keeps trying to give back
// a claim whose caller was told that nothing ran (see releaseLater).
const releaseLaterFor = time.Minute

// release gives back a claim whose operation never ran (its caller was told
// so, and the row must not say otherwise): the row goes back to where it was
// before the claim (absent, stale or failed), so no attempt is burnt and
// nothing is marked abandoned. If the store cannot be told now, it is told
// later.
func (g *Guard) release(p prepared, o owned) {
	ctx, cancel := g.storeCtx(context.Background())
	defer cancel()
	audit := g.after(o.audit, store.AuditReleased)
	won, err := g.store.Release(ctx, store.ReleaseParams{ID: o.id, Nonce: o.nonce, Prev: o.prev, Audit: g.stored(audit)})
	if err != nil {
		g.releaseLater(p, []pendingClaim{{nonce: o.nonce, prev: o.prev, sent: o.leaseFrom, landed: true, audit: o.audit}})
		return
	}
	if won {
		g.landed(audit)
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
	holder, held := pendingIn(us, rec) // of claims sharing a nonce, the one whose row it is
	left := us[:0]
	for _, u := range us {
		switch {
		case found && held && u.nonce == holder.nonce && u.prev != holder.prev:
			left = append(left, u) // the row is another write's of this nonce
		case found && rec.Status == store.RowStarted && rec.ClaimNonce == u.nonce:
			audit := g.after(u.audit, store.AuditReleased)
			won, err := g.store.Release(ctx, store.ReleaseParams{ID: rec.ID, Nonce: u.nonce, Prev: u.prev, Audit: g.stored(audit)})
			if err != nil {
				left = append(left, u)
				continue
			}
			if won {
				if !u.landed {
					g.landed(u.audit) // the claim's event came with the write that landed late
				}
				g.landed(audit)
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
// landed, or landWindow has passed since it was sent. A Reclaim whose guard
// nonce the row no longer holds is not settled by that: a Release puts a
// row's previous nonce and attempt count back, and with them the very
// state the pending UPDATE is guarded by.
func (u pendingClaim) settledFor(rec store.Record, found bool) bool {
	if found && rec.ClaimNonce == u.nonce {
		return rec.Status != store.RowStarted
	}
	return u.landed || time.Since(u.sent) >= landWindow
}
