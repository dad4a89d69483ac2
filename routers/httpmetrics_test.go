package routers

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/metrics"
)

// Requests are counted and timed by route template and status class, read back through the
// /metrics text; the raw path (which holds client keys) never becomes a label, and every
// route's series exist before its first request.
func TestHTTPMetricsByRouteAndStatusClass(t *testing.T) {
	t.Parallel()
	m := metrics.New()
	b := setup(t, setupOpts{options: func(o *Options) { o.HTTPMetrics = m; o.Metrics = m.Handler() }})
	scrape := func() string {
		w := httptest.NewRecorder()
		b.handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		require.Equal(t, http.StatusOK, w.Code)
		return w.Body.String()
	}

	text := scrape()
	for _, route := range []string{"/v1/ops/:scope", "/v1/ops/:scope/keys/:key", "/healthz", "/readyz", "/metrics", UnmatchedRoute} {
		for _, class := range metrics.StatusClasses {
			require.Contains(t, text, `idemguard_http_requests_total{route="`+route+`",status_class="`+class+`"} 0`+"\n")
		}
	}

	require.Equal(t, http.StatusOK, b.post("echo", "secret-key-1", `{"a":1}`).Code)
	require.Equal(t, http.StatusOK, b.post("echo", "secret-key-1", `{"a":1}`).Code)
	require.Equal(t, http.StatusUnauthorized, b.do(req{method: http.MethodGet, path: "/v1/ops/echo/keys/secret-key-2"}).Code)
	require.Equal(t, http.StatusNotFound, b.do(req{method: http.MethodGet, path: "/nope/secret-key-3"}).Code)
	require.Equal(t, http.StatusMethodNotAllowed, b.do(req{method: http.MethodDelete, path: "/v1/ops/echo"}).Code)

	text = scrape()
	for _, want := range []string{
		`idemguard_http_requests_total{route="/v1/ops/:scope",status_class="2xx"} 2`,
		`idemguard_http_requests_total{route="/v1/ops/:scope/keys/:key",status_class="4xx"} 1`,
		`idemguard_http_requests_total{route="unmatched",status_class="4xx"} 2`,
		`idemguard_http_request_duration_seconds_count{route="/v1/ops/:scope",status_class="2xx"} 2`,
		`idemguard_http_requests_total{route="/metrics",status_class="2xx"} 1`,
	} {
		require.Contains(t, text, want+"\n")
	}
	require.NotContains(t, text, "secret-key")
	require.NotContains(t, text, `route="/v1/ops/echo`)
}
