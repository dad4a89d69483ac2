package routers

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/tenancy"
)

// routeKeyHistory is the audit trail of one key (after Options.Prefix).
const routeKeyHistory = "/v1/ops/:scope/keys/:key/history"

// historyAnswer is the answer of GET …/keys/{key}/history: each event as
// store.AuditEvent's own JSON (the key hash only as its keyPrefix).
type historyAnswer struct {
	Events []store.AuditEvent `json:"events"`
}

// keyHistory serves GET /v1/ops/:scope/keys/:key/history: the key's audit
// trail, oldest first. A client key is looked up under every configured
// secret (Guard.History of a Key made with Guard.Key); "~" and a hash under that hash. A key without
// events, and another tenant's key, are the same 404; a store failure is a
// 503.
func (h *handlers) keyHistory(c *gin.Context) {
	tenant, scope, ok := h.tenantScope(c)
	if !ok {
		return
	}
	key, ok := h.historyKey(c, tenant, scope.Name)
	if !ok {
		return
	}
	events, err := h.guard.History(c.Request.Context(), key)
	switch {
	case err != nil && errors.Is(err, idemguard.ErrStoreUnavailable):
		// The cause to the log only: it may name hosts or settings.
		h.log.Warn("http: cannot read the audit trail", slog.String("route", c.FullPath()), slog.Any("err", err))
		h.fail(c, err)
		return
	case err != nil:
		h.fail(c, err)
		return
	case len(events) == 0:
		writeProblem(c, newProblem(http.StatusNotFound, "key-not-found", "Key not found", sanitize.Unknown,
			"no audit events of this key in this scope for your tenant (unknown key, auditing off, or the events are past their retention)"))
		c.Abort()
		return
	}
	body, err := json.Marshal(historyAnswer{Events: events})
	if err != nil {
		h.fail(c, err)
		return
	}
	c.Data(http.StatusOK, contentJSON, body)
}

// historyKey resolves the :key of the history route without reading the
// row: History finds a client key's events under every configured secret
// (they may predate a rotation). It answers 400 itself.
func (h *handlers) historyKey(c *gin.Context, tenant tenancy.ID, scope string) (idemguard.Key, bool) {
	ref := c.Param("key")
	if hash, derived := strings.CutPrefix(ref, derivedRefPrefix); derived {
		key, err := h.guard.KeyOfHash(tenant, scope, hash)
		if err != nil || !isKeyHash(hash) {
			h.fail(c, reject(errInvalidRef, "a derived key reference is ~ followed by the 64 lower-case hex digits of the key hash"))
			return idemguard.Key{}, false
		}
		c.Set(keyHashKey, shortHash(hash))
		return key, true
	}
	key, err := h.guard.Key(tenant, scope, ref) // validates the client key
	if err != nil {
		h.fail(c, reject(errInvalidRef, "a key reference is an Idempotency-Key (1 to %d characters of [A-Za-z0-9_.:-]) or ~ followed by a key hash", keys.MaxClientKeyLen))
		return idemguard.Key{}, false
	}
	c.Set(keyHashKey, shortHash(key.Hash()))
	return key, true
}
