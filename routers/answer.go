package routers

import (
	"net/http"
	"unsafe"

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
	// its own element, so an append to one cannot overwrite the other),
	// and Location's text, when it fits, beside them: one allocation.
	rv := new(refValues)
	b := appendKeyPath(append(rv.text[:0], h.locationPrefix...), scope, ref)
	if &b[0] == &rv.text[0] {
		rv.v[0] = unsafe.String(&rv.text[0], len(b)) // nothing writes rv.text again
	} else {
		rv.v[0] = string(b) // a long prefix, scope or key outgrew the array
	}
	rv.v[1] = ref
	hd[pipeline.HeaderLocation] = rv.v[0:1:1]
	hd[pipeline.HeaderKeyRef] = rv.v[1:2:2]
}

// refValues are the values setRef sets, with room for Location's text.
type refValues struct {
	v    [2]string
	text [96]byte // with v, a 128-byte allocation
}

// keyPath is the lookup path of a key, after Options.Prefix. Scopes and
// refs hold only [A-Za-z0-9._:~-], which need no escaping in a path after
// the first segment.
func keyPath(scope, ref string) string {
	return string(appendKeyPath(nil, scope, ref))
}

// appendKeyPath appends keyPath(scope, ref) to b.
func appendKeyPath(b []byte, scope, ref string) []byte {
	b = append(b, "/v1/ops/"...)
	b = append(b, scope...)
	b = append(b, "/keys/"...)
	return append(b, ref...)
}
