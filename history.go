package idemguard

import (
	"context"

	"github.com/idemguard/idemguard/store"
)

// maxHistory is the most events Guard.History returns.
const maxHistory = 1000

// History returns the audit trail of key, oldest first (at most 1000
// records), from the store (Config.Audit.Store). A Key made from a client
// key finds the key's records under every configured secret. Each replay
// carries its number among the key's replays (store.AuditEvent.Replay).
// Another tenant's key has none.
//
// History returns the persisted rows (store.AuditEvent), the same record
// Config.Observe saw as Event.Audit when the decision was made: what was
// stored is read back as it was stored, without a second shape to map.
func (g *Guard) History(ctx context.Context, key Key) ([]store.AuditEvent, error) {
	if err := key.check(); err != nil {
		return nil, err
	}
	tenant, scope, keyHashes := key.tenant, key.scope, []string{key.hash}
	if key.clientKey != "" {
		keyHashes = g.keyHashes(key)
	}
	sctx, cancel := g.storeCtx(ctx)
	defer cancel()
	events, err := g.store.History(sctx, string(tenant), scope, keyHashes, maxHistory)
	if err != nil {
		return nil, &StoreError{Op: "history", Err: err}
	}
	var n int64
	for i := range events {
		if events[i].Kind == store.AuditReplay {
			events[i].Replay = int(n) + 1
			n += max(events[i].Count, 1)
		}
	}
	return events, nil
}

// keyHashes returns the hashes that name a client key: under the current
// secret first, then under each previous one.
func (g *Guard) keyHashes(k Key) []string {
	out := []string{k.hash}
	for _, s := range g.previous {
		out = append(out, s.deriver.PrincipalKeyHash(string(k.tenant), k.scope, k.principal, k.clientKey, nil))
	}
	return out
}

// HashActor returns "h:" and the first 32 hex characters of the HMAC of
// name under the Guard's secret: an actor for the audit trail that names
// a person (a JWT subject, a user id) without storing who it is. The same
// name gives the same actor while the secret stays.
func (g *Guard) HashActor(name string) string { return "h:" + g.deriver.Actor(name)[:32] }
