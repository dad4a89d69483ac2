package pipeline

import (
	"encoding/hex"
	"strings"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/tenancy"
)

// The key reference codec: how every answer names a key (Location,
// Idempotency-Key-Ref, the key routes' {key}), and how a {key} is read back.
// A reference is the client key, or, for a derived key, "~" and the key
// hash; "~" is not a client-key character, so the two never collide.

// derivedRefPrefix marks a key reference that is a key hash.
const derivedRefPrefix = "~"

// Ref is the key reference of a call with clientKey ("" for a derived key)
// whose key hash is keyHash.
func Ref(clientKey, keyHash string) string {
	if clientKey != "" {
		return clientKey
	}
	return derivedRefPrefix + keyHash
}

// ParseRef resolves a key reference to its Key. A client key is hashed with
// the current secret (Guard.Lookup and Guard.History still find a row made
// under a previous one); a derived reference names its hash. A malformed
// reference is a 400 invalid-key-reference. derived reports a key hash.
// A client key is principal's (idemguard.Call.Principal; "" for the
// tenant's key space); a key hash already names one principal's key.
func ParseRef(g *idemguard.Guard, tenant tenancy.ID, scope, principal, ref string) (key idemguard.Key, derived bool, err error) {
	if hash, derived := strings.CutPrefix(ref, derivedRefPrefix); derived {
		key, err := g.KeyOfHash(tenant, scope, hash)
		if err != nil || !isKeyHash(hash) {
			return idemguard.Key{}, true, Reject(ErrInvalidRef, "a derived key reference is ~ followed by the 64 lower-case hex digits of the key hash")
		}
		return key, true, nil
	}
	key, err = g.PrincipalKey(tenant, scope, principal, ref) // validates the client key
	if err != nil {
		return idemguard.Key{}, false, Reject(ErrInvalidRef, "a key reference is an Idempotency-Key (1 to %d characters of [A-Za-z0-9_.:-]) or ~ followed by a key hash", keys.MaxClientKeyLen)
	}
	return key, false, nil
}

// isKeyHash reports whether s is 64 lower-case hex digits (a key hash).
func isKeyHash(s string) bool {
	if len(s) != 64 || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
