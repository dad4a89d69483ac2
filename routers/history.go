package routers

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
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
	_, _, key, ok := h.keyRoute(c, false)
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
		h.problem(c, pipeline.NewProblem(http.StatusNotFound, "key-not-found", "Key not found", sanitize.Unknown,
			"no audit events of this key in this scope for your tenant (unknown key, auditing off, or the events are past their retention)"))
		c.Abort()
		return
	}
	body, err := json.Marshal(historyAnswer{Events: events})
	if err != nil {
		h.fail(c, err)
		return
	}
	c.Data(http.StatusOK, pipeline.ContentJSON, body)
}
