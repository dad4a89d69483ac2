package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/browsertest"
)

// TestBrowserKeepsKeyUntilOutcomeKnown drives the demo page in headless Chromium
// (web/browser/keepkey.browser.mjs): the first request runs the operation but its answer is
// lost, the client's retry is refused with 401, and the user clicks again. The page must send one
// key all three times and show the replay; the server must have run the operation once.
//
// It needs node, `npm ci` in web/ and Chromium (.ci/run installs them); without them it skips,
// except under CI=true.
func TestBrowserKeepsKeyUntilOutcomeKnown(t *testing.T) {
	t.Parallel()
	web, chromium := browsertest.Tools(t, "../web")

	s := startService(t, map[string]string{"IDEMGUARD_MODE": "development", "IDEMGUARD_LISTEN": "127.0.0.1:0"}, "")
	var rep struct {
		OK       bool `json:"ok"`
		Key      string
		Replay   bool
		Requests []struct {
			Key        string
			LostStatus int
		}
	}
	browsertest.Run(t, web, chromium, &rep, "keepkey.browser.mjs", "--url", s.url(""))

	require.True(t, rep.OK)
	require.True(t, rep.Replay)
	require.Len(t, rep.Requests, 3)
	require.Equal(t, http.StatusOK, rep.Requests[0].LostStatus, "the lost answer was a success")
	for _, r := range rep.Requests {
		require.Equal(t, rep.Key, r.Key, "one key for the lost answer, the 401 and the retry")
	}

	// The server's side: one execution, and the 401 in the request log.
	c := newClient(t)
	res, rec := lookup(t, c, s, "demo", "dev-demo-key", rep.Key)
	require.Equal(t, http.StatusOK, res.status, res.String())
	require.Equal(t, "succeeded", rec.Status)
	require.Equal(t, 1, rec.AttemptCount)
	metrics := do(t, c, s, request{method: http.MethodGet, path: "/metrics"})
	require.Equal(t, http.StatusOK, metrics.status)
	require.Equal(t, 1, metricValue(t, string(metrics.body), `idemguard_claims_total{scope="demo"}`))
	require.Equal(t, 1, metricValue(t, string(metrics.body), `idemguard_operations_total{outcome="succeeded",scope="demo"}`))
	eventually(t, 10*time.Second, "the refused retry in the request log", func() bool {
		for _, line := range strings.Split(s.logs.String(), "\n") {
			var l struct {
				Msg, Method string
				Status      int
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "http: request" && l.Method == http.MethodPost && l.Status == http.StatusUnauthorized {
				return true
			}
		}
		return false
	})
}
