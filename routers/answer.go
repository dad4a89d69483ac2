package routers

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

// fail answers err with the one error writer (pipeline.Answers.Fail) and
// stops the handler chain.
func (h *handlers) fail(c *gin.Context, err error) {
	p := h.answers.Fail(c.Writer, c.Request, c.FullPath(), err)
	if p.Status == http.StatusTooManyRequests {
		if tenant, ok := tenantOf(c); ok {
			h.tenantLimits.noteLimited(tenant, err)
		}
	}
	logOf(c).stopReason = string(p.StopReason)
	c.Abort()
}

// problem writes p with the one error writer, for the request log too.
func (h *handlers) problem(c *gin.Context, p pipeline.Problem) {
	logOf(c).stopReason = string(p.StopReason)
	h.answers.Problem(c.Writer, p)
}

// setRef adds the key reference headers: the key's record (Location) and
// its reference.
func (h *handlers) setRef(hd http.Header, scope, ref string) {
	// The names are canonical: assigned directly, without Set's
	// canonicalization, the two values in one array (each slice capped at
	// its own element, so an append to one cannot overwrite the other).
	v := []string{h.locationPrefix + "/v1/ops/" + scope + "/keys/" + ref, ref} // keyPath, in one concatenation
	hd[pipeline.HeaderLocation] = v[0:1:1]
	hd[pipeline.HeaderKeyRef] = v[1:2:2]
}

// keyPath is the lookup path of a key, after Options.Prefix. Scopes and
// refs hold only [A-Za-z0-9._:~-], which need no escaping in a path after
// the first segment.
func keyPath(scope, ref string) string {
	return "/v1/ops/" + scope + "/keys/" + ref
}
