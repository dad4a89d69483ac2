package routers

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

// resetStatus is the status of a key record answered by DELETE: the key's
// stored answer is gone, and the next request with the key runs afresh.
const resetStatus = "reset"

// resetKey serves DELETE /v1/ops/:scope/keys/:key: the finished key's
// stored answer is reset (idemguard.Guard.Reset), answered 200 with the
// key record as it was (status "reset", attemptCount the attempt it ended)
// once no replica replays the old answer any more; 409 for a running key
// (cancel it first); 403 when the scope does not allow resets; 404 for an
// absent or expired key, or another tenant's. Only a reset changes anything.
func (h *handlers) resetKey(c *gin.Context) {
	scope, ref, key, ok := h.keyRoute(c, true)
	if !ok {
		return
	}
	info, err := h.guard.Reset(c.Request.Context(), key, scope.Settings)
	if err != nil {
		h.fail(c, err)
		return
	}
	rec := keyRecord{Ref: ref, Scope: scope.Name, Status: resetStatus, AttemptCount: info.Attempts}
	if !info.CreatedAt.IsZero() {
		rec.CreatedAt = pipeline.FormatTime(info.CreatedAt)
	}
	if !info.CompletedAt.IsZero() {
		rec.CompletedAt = pipeline.FormatTime(info.CompletedAt)
	}
	c.Data(http.StatusOK, pipeline.ContentJSON, pipeline.EncodeJSON(rec))
}
