package routers

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// Options.Prefix moves the /v1 routes, and the Location they answer.
func TestPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{options: func(o *Options) { o.Prefix = "/idem" }})
	w := b.do(req{method: http.MethodPost, path: "/idem/v1/ops/echo", body: `{"n":1}`, apiKey: acmeKey1,
		headers: []string{"Idempotency-Key", "k1"}})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, "/idem/v1/ops/echo/keys/k1", w.Header().Get("Location"))

	w = b.do(req{method: http.MethodGet, path: "/idem/v1/ops/echo/keys/k1", apiKey: acmeKey1})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())

	w = b.post("echo", "k1", `{"n":1}`)
	require.Equal(t, http.StatusNotFound, w.Code, "the unprefixed route must not exist")
	require.Equal(t, http.StatusOK, b.do(req{method: http.MethodGet, path: "/healthz"}).Code)
	require.EqualValues(t, 1, b.calls["echo"].Load())
}

// Register mounts the /v1 routes in a team's own gin engine, under a group;
// the team's other routes are untouched, and Location includes the group.
func TestRegisterInOwnEngine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.GET("/team/hello", func(c *gin.Context) { c.String(http.StatusOK, "hi") })
	opts := b.opts
	opts.Prefix = "/idem"
	require.NoError(t, Register(r.Group("/team"), opts))
	b.handler = r

	w := b.do(req{method: http.MethodPost, path: "/team/idem/v1/ops/echo", body: `{"n":2}`, apiKey: acmeKey1,
		headers: []string{"Idempotency-Key", "k2"}})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	loc := w.Header().Get("Location")
	require.Equal(t, "/team/idem/v1/ops/echo/keys/k2", loc)
	w = b.do(req{method: http.MethodGet, path: loc, apiKey: acmeKey1})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())

	w = b.do(req{method: http.MethodPost, path: "/team/idem/v1/ops/echo", body: `{"n":2}`, headers: []string{"Idempotency-Key", "k2"}})
	require.Equal(t, http.StatusUnauthorized, w.Code, "the API's authentication guards the mounted routes")
	require.Equal(t, "hi", b.do(req{method: http.MethodGet, path: "/team/hello"}).Body.String(), "the team's own route needs no API key")

	require.ErrorContains(t, Register(r, Options{}), "Options.Guard is required")
}

// An operation that returns a non-object is a 500 invalid-result (never a
// 502 provider_error); the key runs again once fixed.
func TestInvalidResultIs500(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.post("invalid", "k1", `{"n":1}`)
	require.Equal(t, http.StatusInternalServerError, w.Code, w.Body.String())
	p := problemOf(t, w)
	require.Equal(t, ProblemTypePrefix+"invalid-result", p["type"])
	require.Equal(t, "unknown", p["stopReason"])
	require.NotContains(t, w.Body.String(), "a plain string")

	w = b.post("invalid", "k1", `{"n":1}`)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.EqualValues(t, 2, b.calls["invalid"].Load())
}
