package idemguard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/idemguard/idemguard/store"
)

// Cancel asks the execution running under key to stop. The request is recorded
// on the row, so it works from any process: the owner's next heartbeat
// (every StaleAfter/3) reads it back and cancels the operation's context
// with cause ErrCanceled; the key then ends failed with stopReason canceled,
// the attempt is not counted, and the same call runs it again.
//
// It returns ErrNotFound for an absent or expired key (or another tenant's),
// ErrKeyFinished for a key whose answer is stored, and a *StoreError when
// the store cannot be reached. A key whose owner went silent (stale) is
// still cancelled: its row records the request, but nobody is left to read
// it back, so the key ends as any stale key does when resubmitted: under
// StaleTakeover the resubmission takes it over (a new attempt, counted;
// the silent one may have done part of its work), under StaleFail it is
// marked abandoned, which is final.
func (g *Guard) Cancel(ctx context.Context, key Key) error {
	if err := key.check(); err != nil {
		return err
	}
	tenant, scope, keyHash := key.tenant, key.scope, key.hash
	if err := validActor(ActorFrom(ctx)); err != nil {
		return fmt.Errorf("%w: the context's actor (WithActor): %w", ErrInvalidInput, err)
	}
	fallback := cmp.Or(g.cfg.Defaults.StaleAfter, DefaultStaleAfter)
	for range maxRaces {
		sctx, cancel := g.storeCtx(ctx)
		rec, err := g.store.Get(sctx, string(tenant), scope, keyHash)
		cancel()
		switch {
		case errors.Is(err, ErrNotFound):
			return ErrNotFound
		case err != nil:
			return &StoreError{Op: "cancel", Err: err}
		case rec.Reclaimable(fallback):
			return ErrNotFound
		case rec.Status != store.RowStarted:
			return ErrKeyFinished
		case !rec.CancelRequestedAt.IsZero():
			return nil // asked for already; the owner has it or will
		}
		audit := g.newAudit(prepared{tenant: string(tenant), scope: scope, actor: ActorFrom(ctx)},
			store.AuditCanceled, keyHash, rec.Attempts, rec.Now)
		sctx, cancel = g.storeCtx(context.WithoutCancel(ctx))
		ok, err := g.store.RequestCancel(sctx, store.CancelParams{ID: rec.ID, Nonce: rec.ClaimNonce, Audit: g.stored(audit)})
		cancel()
		if err == nil && ok {
			g.landed(audit)
			g.log.Info("guard: cancel requested", slog.String("tenant", string(tenant)), slog.String("scope", scope),
				slog.String("key_hash", shortHash(keyHash)), slog.Int("attempt", rec.Attempts))
			g.jobs.notify(keyOfHash(tenant, scope, keyHash), string(EventCancelRequested))
			return nil
		}
		if err != nil && !outcomeUnknown(err) {
			return &StoreError{Op: "cancel", Err: err}
		}
		// Another execution took the row meanwhile, or the outcome is
		// unknown: the row says which.
	}
	return &StoreError{Op: "cancel", Err: errors.New("too many lost races in a row")}
}
