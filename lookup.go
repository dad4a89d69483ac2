package idemguard

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/tenancy"
)

// Lookup returns the record of key. An absent or expired key is
// ErrNotFound; so is another tenant's key. A Key made from a client key
// finds a row made under any configured secret.
func (g *Guard) Lookup(ctx context.Context, key Key) (KeyInfo, error) {
	if err := key.check(); err != nil {
		return KeyInfo{}, err
	}
	tenant, scope, hash := key.tenant, key.scope, key.hash
	if key.clientKey != "" && len(g.previous) > 0 { // the key's row may have been made under a previous secret (secrets.go)
		var err error
		if hash, err = g.lookupHashAny(ctx, key); err != nil {
			return KeyInfo{}, err
		}
	}
	return g.lookupHash(ctx, tenant, scope, hash)
}

// lookupHash is Lookup by one key hash.
func (g *Guard) lookupHash(ctx context.Context, tenant tenancy.ID, scope, keyHash string) (KeyInfo, error) {
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
	info, err := keyInfoOf(keyHash, rec, cmp.Or(g.cfg.Defaults.StaleAfter, DefaultStaleAfter))
	if err != nil {
		return KeyInfo{}, &StoreError{Op: "lookup", Err: err}
	}
	return info, nil
}

// keyInfoOf is what a row tells about its key; fallback is the lease of a
// row that carries none.
func keyInfoOf(keyHash string, rec store.Record, fallback time.Duration) (KeyInfo, error) {
	info := KeyInfo{KeyHash: keyHash, SecretID: rec.SecretID, Status: rec.Status, Attempts: rec.Attempts, CreatedAt: rec.CreatedAt,
		StartedAt: rec.StartedAt, HeartbeatAt: rec.HeartbeatAt, CompletedAt: rec.CompletedAt, ExpiresAt: rec.ExpiresAt,
		Stale: rec.Stale(fallback), CancelRequested: rec.Status == store.RowStarted && !rec.CancelRequestedAt.IsZero()}
	if pr := rec.Progress; !pr.At.IsZero() {
		info.Progress = &pr
	}
	if rec.Status != store.RowStarted {
		st, err := decodeStored(rec)
		if err != nil {
			return KeyInfo{}, err
		}
		info.StatusCode, info.Header, info.DroppedFields = rec.ResponseCode, st.header, st.dropped
		if st.document != nil {
			info.Document = st.document
		} else {
			info.Envelope = &st.env
		}
		info.StreamEvents = streamEventsState(rec)
	}
	return info, nil
}
