package routers

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

// setRef sets Location (the prefix and keyPath) and the reference, each a
// slice of its own value (an append to one copies it), in one allocation
// when Location fits beside them; a longer one is made apart, the same.
func TestSetRefValues(t *testing.T) {
	h := &handlers{locationPrefix: "/idempotency"}
	long := strings.Repeat("s", 255)
	for _, c := range []struct{ scope, ref string }{{"chat", "order-7"}, {long, "~" + strings.Repeat("a", 64)}, {"chat", strings.Repeat("k", 255)}} {
		hd := http.Header{}
		h.setRef(hd, c.scope, c.ref)
		require.Equal(t, []string{"/idempotency" + keyPath(c.scope, c.ref)}, hd[pipeline.HeaderLocation])
		require.Equal(t, "/v1/ops/"+c.scope+"/keys/"+c.ref, keyPath(c.scope, c.ref))
		require.Equal(t, []string{c.ref}, hd[pipeline.HeaderKeyRef])
		require.Equal(t, 1, cap(hd[pipeline.HeaderLocation]))
		require.Equal(t, 1, cap(hd[pipeline.HeaderKeyRef]))
		hd.Add(pipeline.HeaderLocation, "x")
		require.Equal(t, []string{c.ref}, hd[pipeline.HeaderKeyRef])
	}
	hd := http.Header{}
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() { h.setRef(hd, "chat", "order-7") }))
}
