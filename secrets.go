package idemguard

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/store"
)

// Versioned secrets
//
// Every key hash and fingerprint is an HMAC under a secret, so a new secret
// gives every request a new key hash. Config.PreviousSecrets keep the rows
// made under earlier secrets in reach while they live: claims are always
// made under Config.Secret, and a request is a duplicate of a live row made
// under any configured secret. The rule that keeps two hashes of one request
// from both running is in the package's protocol documentation (protocol.go,
// "Secret Rotation"); this file holds all of it that the claim path needs.

// SecretVersion is a secret the Guard no longer claims under but still
// recognises: a row made under it is found, replayed, retried or taken over
// like a row made under Config.Secret.
type SecretVersion struct {
	// ID is the name the rows made under Secret carry (secret_id); "" names
	// the unnamed secret of a deployment that never set Config.SecretID.
	ID string
	// Secret is at least 32 bytes, like Config.Secret.
	Secret []byte
}

// validateSecrets checks the current and previous secrets: each long
// enough, every id well formed and used once, no secret configured twice.
// Messages name the setting, never a secret's value.
func (c Config) validateSecrets() error {
	if err := keys.ValidateSecretID(c.SecretID); err != nil {
		return fmt.Errorf("idemguard: Config.SecretID: %w", err)
	}
	for i, v := range c.PreviousSecrets {
		if err := keys.ValidateSecretID(v.ID); err != nil {
			return fmt.Errorf("idemguard: Config.PreviousSecrets[%d]: %w", i, err)
		}
		if len(v.Secret) < keys.MinSecretBytes {
			return fmt.Errorf("idemguard: Config.PreviousSecrets[%d] (id %q) must be at least %d bytes, got %d",
				i, v.ID, keys.MinSecretBytes, len(v.Secret))
		}
		if v.ID == c.SecretID {
			return fmt.Errorf("idemguard: Config.PreviousSecrets[%d] has the id %q of Config.SecretID; every secret needs its own id", i, v.ID)
		}
		if bytes.Equal(v.Secret, c.Secret) {
			return fmt.Errorf("idemguard: Config.PreviousSecrets[%d] (id %q) is Config.Secret itself; remove it", i, v.ID)
		}
		for _, w := range c.PreviousSecrets[:i] {
			if w.ID == v.ID {
				return fmt.Errorf("idemguard: Config.PreviousSecrets holds the id %q twice", v.ID)
			}
			if bytes.Equal(w.Secret, v.Secret) {
				return fmt.Errorf("idemguard: Config.PreviousSecrets holds one secret twice (ids %q and %q)", w.ID, v.ID)
			}
		}
	}
	return nil
}

// previousSecret is a configured previous secret's deriver.
type previousSecret struct {
	id      string
	deriver *keys.Deriver
}

func newPreviousSecrets(vs []SecretVersion) ([]previousSecret, error) {
	var out []previousSecret
	for _, v := range vs {
		d, err := keys.New(v.Secret)
		if err != nil {
			return nil, err
		}
		out = append(out, previousSecret{id: v.ID, deriver: d})
	}
	return out, nil
}

// keyVersion is one request's identity under one configured secret.
type keyVersion struct {
	secretID, keyHash, fingerprint string
}

// versionsOf returns the request's identity under every configured secret,
// the current one first; nil when no previous secret is configured, so a
// Guard without one derives, reads and writes exactly as before.
func (g *Guard) versionsOf(p prepared, clientKey string, canonical []byte) []keyVersion {
	if len(g.previous) == 0 {
		return nil
	}
	vs := make([]keyVersion, 0, 1+len(g.previous))
	vs = append(vs, keyVersion{secretID: p.secretID, keyHash: p.keyHash, fingerprint: p.fingerprint})
	for _, s := range g.previous {
		vs = append(vs, keyVersion{secretID: s.id, keyHash: s.deriver.PrincipalKeyHash(p.tenant, p.scope, p.principal, clientKey, canonical),
			fingerprint: s.deriver.Fingerprint(canonical)})
	}
	return vs
}

// on returns p working on the row of version v.
func (p prepared) on(v keyVersion) prepared {
	p.secretID, p.keyHash, p.fingerprint = v.secretID, v.keyHash, v.fingerprint
	return p
}

// onPrevious reports whether p works on a row made under a previous secret.
func (p prepared) onPrevious() bool { return len(p.versions) > 0 && p.keyHash != p.versions[0].keyHash }

// otherHashes are the request's key hashes under every configured secret
// but the one p works on.
func (p prepared) otherHashes() []string {
	out := make([]string, 0, len(p.versions))
	for _, v := range p.versions {
		if v.keyHash != p.keyHash {
			out = append(out, v.keyHash)
		}
	}
	return out
}

// version returns the configured version whose key hash is h.
func (p prepared) version(h string) (keyVersion, bool) {
	for _, v := range p.versions {
		if v.keyHash == h {
			return v, true
		}
	}
	return keyVersion{}, false
}

// The favoured claim of two made at once under two secrets (the smaller key
// hash) waits up to crossWaitFor, polling, for the other to be given back
// before it yields itself; the other yields at once. The wait only spares
// both callers an in-progress answer when both saw each other: the rule is
// safe without it.
const (
	crossWaitFor   = 250 * time.Millisecond
	crossFirstPoll = 5 * time.Millisecond
)

// crossCheck is made by a call that has just won the claim o on l.p's row,
// before the operation starts, when previous secrets are configured: it
// reads the request's rows under every other configured secret, in one
// statement. No live row there (absent, or reclaimable like an expired
// one): the call runs. A live one: the call gives its claim back (nothing
// ran) and goes on with that row, which answers it (replay, in progress,
// mismatch) or is claimed by the guarded transition its state allows
// (retry, takeover), followed by this same check. So a claim runs only if a
// read made after it had landed saw no live row of the request under
// another secret; of two claims under two secrets, the later one to land
// sees the earlier one, so they never both run. It returns errAgain after
// yielding (the loop reads the other row) and nil to run.
func (l *claimLoop) crossCheck(o owned) error {
	g, p := l.g, l.p
	others := p.otherHashes()
	poll := crossFirstPoll
	deadline := time.Now().Add(crossWaitFor)
	for {
		ctx, cancel := g.writeCtx(l.ctx) // detached, bounded by StoreTimeout (deadline.go)
		rows, err := g.store.GetMany(ctx, p.tenant, p.scope, others)
		cancel()
		if err != nil {
			// Without the read the claim cannot be shown to be the only
			// one: give it back, fail closed.
			g.release(p, o)
			l.ownedNonce = o.nonce // released above; finish must not release it again
			return g.storeErr(l.ctx, p, "read", err)
		}
		other, found := liveRow(rows, p.settings.StaleAfter)
		if !found {
			return nil
		}
		if other.Status == store.RowStarted && p.keyHash < other.KeyHash && time.Now().Before(deadline) && g.lifetime.Err() == nil {
			// Favoured, and the other claim may be about to yield to this
			// one: read again shortly.
			sleepCtx(g.lifetime, min(jitter(poll), time.Until(deadline)))
			poll *= 2
			continue
		}
		g.release(p, o)
		l.ownedNonce = o.nonce
		v, _ := p.version(other.KeyHash)
		g.log.Debug("guard: claim given back to the request's row under another secret",
			g.attrs(p, slog.String("secret_id", v.secretID), slog.String("status", string(other.Status)))...)
		l.switchTo(p.on(v))
		l.races++
		return errAgain
	}
}

// liveRow returns a row of rows that is not reclaimable (a row made under
// another secret that counts for the request), if there is one; the oldest
// by id if there are several.
func liveRow(rows []store.Record, staleAfter time.Duration) (store.Record, bool) {
	var live store.Record
	found := false
	for _, r := range rows {
		if !r.Reclaimable(staleAfter) && (!found || r.ID < live.ID) {
			live, found = r, true
		}
	}
	return live, found
}

// switchTo moves the loop to another row of the request. The claims this
// call sent to the row it leaves and never confirmed are handed to the
// background release for that row (finish knows only the row the call ends
// on).
func (l *claimLoop) switchTo(to prepared) {
	var left []pendingClaim
	for _, u := range l.unconfirmed {
		if u.nonce != l.ownedNonce {
			left = append(left, u)
		}
	}
	l.g.releaseLater(l.p, left)
	l.unconfirmed, l.unsure, l.ownedNonce = nil, nil, ""
	l.p, l.needClaim = to, false
}

// backToCurrent moves a loop working on a row made under a previous secret
// back to the current secret, when that row is gone or reclaimable: a new
// claim is always made under the current secret. It reports whether it
// moved.
func (l *claimLoop) backToCurrent() bool {
	if !l.p.onPrevious() {
		return false
	}
	l.switchTo(l.p.on(l.p.versions[0]))
	l.needClaim = true
	return true
}

// readFirstAny is the read before the claim when previous secrets are
// configured: the request's rows under every configured secret, in one
// read, and a replayable one with p on its secret, if there is one (else
// ErrNotFound: the claim path decides, as after any read first).
func (g *Guard) readFirstAny(ctx context.Context, p prepared) (prepared, store.Record, error) {
	hashes := make([]string, len(p.versions))
	for i, v := range p.versions {
		hashes[i] = v.keyHash
	}
	sctx, cancel := g.storeCtx(ctx)
	defer cancel()
	rows, err := g.store.GetMany(sctx, p.tenant, p.scope, hashes)
	if err != nil {
		return p, store.Record{}, err
	}
	for _, r := range rows {
		if v, ok := p.version(r.KeyHash); ok && replayable(r, p.on(v)) {
			return p.on(v), r, nil
		}
	}
	return p, store.Record{}, ErrNotFound
}

// lookupHashAny is Lookup's key hash when previous secrets are configured:
// the hash of the key's row under any configured secret, found in one read;
// a live row first, the current secret's before others. Without a row it is
// current, for Lookup to report ErrNotFound.
func (g *Guard) lookupHashAny(ctx context.Context, key Key) (string, error) {
	tenant, scope, current := key.tenant, key.scope, key.hash
	hashes := g.keyHashes(key)
	sctx, cancel := g.storeCtx(ctx)
	defer cancel()
	rows, err := g.store.GetMany(sctx, string(tenant), scope, hashes)
	if err != nil {
		return "", &StoreError{Op: "lookup", Err: err}
	}
	staleAfter := cmp.Or(g.cfg.Defaults.StaleAfter, DefaultStaleAfter)
	for _, live := range []bool{true, false} {
		for _, h := range hashes {
			for _, r := range rows {
				if r.KeyHash == h && !r.Reclaimable(staleAfter) == live {
					return h, nil
				}
			}
		}
	}
	return current, nil
}
