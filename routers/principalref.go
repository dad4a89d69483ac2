package routers

// A principal's derived key references.
//
// A key derived from the inputs is named by "~" and its hash. In a
// principal's key space (Scope.Isolation) that hash is the principal's own
// (the principal enters the HMAC), but a reference is a bearer name: another
// user of the tenant who was shown it could read the key with it. So the
// reference a principal is given is the hash with its first half masked by
// an HMAC of (tenant, scope, principal) under the guard's secret, and the
// key routes unmask what a principal sends the same way: one principal's
// reference, sent by another, names no key (404). The mask is computed only
// for a principal's derived keys, once per answer or key route.

import (
	"encoding/hex"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/tenancy"
)

// ref is the key reference of a call's answer: pipeline.Ref, with a
// principal's derived key masked.
func (h *handlers) ref(c *gin.Context, scope, clientKey, keyHash string) string {
	tenant, _ := tenantOf(c)
	return h.refOf(tenant, scope, principalFrom(c), clientKey, keyHash)
}

// refOf is ref for a caller of tenant in principal's key space.
func (h *handlers) refOf(tenant tenancy.ID, scope, principal, clientKey, keyHash string) string {
	if clientKey != "" || principal == "" {
		return pipeline.Ref(clientKey, keyHash)
	}
	return pipeline.Ref("", h.maskHash(string(tenant), scope, principal, keyHash))
}

// maskHash XORs the first 32 hex digits of keyHash (a key hash: 64
// lower-case hex digits) with the principal's mask; applied twice it gives
// keyHash back. Anything else is returned as it is (the key routes then
// answer 400 or 404 as for any reference).
func (h *handlers) maskHash(tenant, scope, principal, keyHash string) string {
	// The NUL bytes keep this input apart from every name HashActor gets
	// elsewhere (a JWT subject, "jwt:…", "key:…").
	mask, err := hex.DecodeString(h.guard.HashActor("\x00ref\x00" + tenant + "\x00" + scope + "\x00" + principal)[2:])
	if err != nil || len(keyHash) != 4*len(mask) {
		return keyHash
	}
	half := make([]byte, len(mask))
	if _, err := hex.Decode(half, []byte(keyHash[:2*len(mask)])); err != nil {
		return keyHash
	}
	for i := range half {
		half[i] ^= mask[i]
	}
	return hex.EncodeToString(half) + keyHash[2*len(mask):]
}
