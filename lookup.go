package idemguard

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/tenancy"
)

// Lookup returns the record of a client key in tenant's scope. An absent or
// expired key is ErrNotFound; so is another tenant's key.
func (g *Guard) Lookup(ctx context.Context, tenant tenancy.ID, scope, clientKey string) (KeyInfo, error) {
	if err := keys.ValidateClientKey(clientKey); err != nil {
		return KeyInfo{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	return g.LookupHash(ctx, tenant, scope, g.deriver.KeyHash(string(tenant), scope, clientKey, nil))
}

// LookupHash is Lookup by the key hash a Result carries (for derived keys).
func (g *Guard) LookupHash(ctx context.Context, tenant tenancy.ID, scope, keyHash string) (KeyInfo, error) {
	if _, err := tenancy.ParseID(string(tenant)); err != nil {
		return KeyInfo{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if err := keys.ValidateScope(scope); err != nil {
		return KeyInfo{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	ctx, cancel := g.storeCtx(ctx)
	defer cancel()
	rec, err := g.store.Get(ctx, string(tenant), scope, keyHash)
	if errors.Is(err, ErrNotFound) {
		return KeyInfo{}, ErrNotFound
	}
	if err != nil {
		return KeyInfo{}, &StoreError{Op: "lookup", Err: err}
	}
	// A started row is judged by the lease its owner promised (stored in
	// the row), not by this reader's settings.
	if rec.Reclaimable(cmp.Or(g.cfg.Defaults.StaleAfter, DefaultStaleAfter)) {
		return KeyInfo{}, ErrNotFound
	}
	info := KeyInfo{KeyHash: keyHash, Status: KeyStatus(rec.Status), Attempts: rec.Attempts, CreatedAt: rec.CreatedAt,
		StartedAt: rec.StartedAt, HeartbeatAt: rec.HeartbeatAt, CompletedAt: rec.CompletedAt, ExpiresAt: rec.ExpiresAt}
	if rec.Status != RowStarted {
		env, err := decodeStored(rec)
		if err != nil {
			return KeyInfo{}, &StoreError{Op: "lookup", Err: err}
		}
		info.Envelope, info.StatusCode = &env, rec.ResponseCode
		info.StreamEvents = streamEventsState(rec)
	}
	return info, nil
}
