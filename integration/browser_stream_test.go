package integration

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/browsertest"
)

// TestBrowserStreamResumesAfterReload drives the demo page in headless Chromium
// (web/browser/stream.browser.mjs): Stream shows the answer word by word, the page is reloaded in
// the middle, and the page must resume the action with its key and show the whole answer from the
// first word, as the replay of the first page's execution. The server must have run the
// operation once. Without the client keeping the key across the reload, the resumed request
// would be a second execution under a new key.
//
// It needs node, `npm ci` in web/ and Chromium (.ci/run installs them); without them it skips,
// except under CI=true.
func TestBrowserStreamResumesAfterReload(t *testing.T) {
	t.Parallel()
	web, chromium := browsertest.Tools(t, "../web")

	s := startService(t, map[string]string{"IDEMGUARD_MODE": "development", "IDEMGUARD_LISTEN": "127.0.0.1:0"}, "")
	var rep struct {
		OK      bool `json:"ok"`
		Key     string
		Partial string
		Answer  string
		Replay  bool
		Keys    []string
	}
	browsertest.Run(t, web, chromium, &rep, "stream.browser.mjs", "--url", s.url(""))
	require.True(t, rep.OK)
	require.True(t, rep.Replay)
	require.NotEqual(t, rep.Partial, rep.Answer, "the reload came in the middle of the stream")
	require.GreaterOrEqual(t, len(rep.Keys), 2)
	for _, k := range rep.Keys {
		require.Equal(t, rep.Key, k, "one key before and after the reload, and for the replay")
	}

	c := newClient(t)
	res, rec := lookup(t, c, s, "demo", "dev-demo-key", rep.Key)
	require.Equal(t, http.StatusOK, res.status, res.String())
	require.Equal(t, "succeeded", rec.Status)
	require.Equal(t, 1, rec.AttemptCount, "the operation ran once")
	metrics := do(t, c, s, request{method: http.MethodGet, path: "/metrics"})
	require.Equal(t, 1, metricValue(t, string(metrics.body), `idemguard_operations_total{outcome="succeeded",scope="demo"}`))
}
