package routers

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/ops"
)

// An upstream that rejects the inputs themselves (a 4xx other than 408, 409
// and 429) is final for those inputs (DESIGN §7): stored as failed with
// stopReason invalid_input, answered 422, replayed, never sent again.
func TestUpstreamRejectionIsFinal422(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"bad input"}`))
	}))
	t.Cleanup(upstream.Close)
	b := setup(t, setupOpts{options: func(o *Options) {
		o.Scopes = []Scope{{Name: "rejects", Run: ops.HTTPJSON(ops.HTTPJSONConfig{URL: upstream.URL})}}
	}})
	first := b.post("rejects", "r-1", `{"n":1}`)
	require.Equal(t, http.StatusUnprocessableEntity, first.Code, first.Body.String())
	require.Equal(t, "invalid_input", problemOf(t, first)["stopReason"])
	for range 2 {
		again := b.post("rejects", "r-1", `{"n":1}`)
		require.Equal(t, http.StatusUnprocessableEntity, again.Code)
		p := problemOf(t, again)
		require.Equal(t, "invalid_input", p["stopReason"])
		require.Equal(t, true, p["cached"])
		require.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
	}
	require.EqualValues(t, 1, calls.Load(), "rejected inputs were sent upstream again")
}
