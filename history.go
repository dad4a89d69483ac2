package idemguard

import (
	"context"
	"fmt"

	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/tenancy"
)

// maxHistory is the most events Guard.History returns.
const maxHistory = 1000

// History returns the audit trail of one key of tenant's scope, oldest
// first (at most maxHistory events), from the store (Config.Audit.Store).
// keyHashes are the key's hashes: Result.KeyHash, or KeyHashes for a
// client key, which names it under every configured secret. Each replay
// carries its number among the key's replays (AuditEvent.Replay). Another
// tenant's key has no events.
func (g *Guard) History(ctx context.Context, tenant tenancy.ID, scope string, keyHashes []string) ([]store.AuditEvent, error) {
	if _, err := tenancy.ParseID(string(tenant)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if err := keys.ValidateScope(scope); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if len(keyHashes) == 0 {
		return nil, fmt.Errorf("%w: no key hash", ErrInvalidInput)
	}
	sctx, cancel := g.storeCtx(ctx)
	defer cancel()
	events, err := g.store.History(sctx, string(tenant), scope, keyHashes, maxHistory)
	if err != nil {
		return nil, &StoreError{Op: "history", Err: err}
	}
	n := 0
	for i := range events {
		if events[i].Kind == store.AuditReplay {
			n++
			events[i].Replay = n
		}
	}
	return events, nil
}

// KeyHashes returns the hashes that name a client key of tenant's scope:
// under the current secret first, then under each previous one.
func (g *Guard) KeyHashes(tenant tenancy.ID, scope, clientKey string) ([]string, error) {
	if err := keys.ValidateClientKey(clientKey); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	out := []string{g.deriver.KeyHash(string(tenant), scope, clientKey, nil)}
	for _, s := range g.previous {
		out = append(out, s.deriver.KeyHash(string(tenant), scope, clientKey, nil))
	}
	return out, nil
}

// HashActor returns "h:" and the first 32 hex characters of the HMAC of
// name under the Guard's secret: an actor for the audit trail that names
// a person (a JWT subject, a user id) without storing who it is. The same
// name gives the same actor while the secret stays.
func (g *Guard) HashActor(name string) string { return "h:" + g.deriver.Actor(name)[:32] }
