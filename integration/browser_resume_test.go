package integration

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/browsertest"
)

// TestBrowserStreamResumesAfterACutConnection drives the demo page in
// headless Chromium (web/browser/resume.browser.mjs) through a TCP proxy:
// Stream shows the answer word by word, every connection through the proxy
// is cut in the middle, and the page's client must reconnect on its own
// with Last-Event-ID and show the whole answer, each word once: the page's
// text equals the stored answer. The server ran the operation once. A
// client that does not resume ends the stream with an error; one that
// resumes without Last-Event-ID shows the first words twice.
//
// Like the other browser tests it needs node, `npm ci` in web/ and
// Chromium, and skips without them except under CI=true.
func TestBrowserStreamResumesAfterACutConnection(t *testing.T) {
	t.Parallel()
	web, chromium := browsertest.Tools(t, "../web")

	s := startService(t, map[string]string{"IDEMGUARD_MODE": "development", "IDEMGUARD_LISTEN": "127.0.0.1:0"}, "")
	proxy := newTCPProxy(t, s.addr)
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		proxy.closeAll()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(cut.Close)

	var rep struct {
		OK         bool   `json:"ok"`
		Key        string `json:"key"`
		Partial    string `json:"partial"`
		Answer     string `json:"answer"`
		Reconnects int    `json:"reconnects"`
		Posts      []struct {
			Key         string  `json:"key"`
			LastEventID *string `json:"lastEventId"`
		} `json:"posts"`
	}
	browsertest.Run(t, web, chromium, &rep, "resume.browser.mjs", "--url", "http://"+proxy.addr(), "--cut", cut.URL)
	require.True(t, rep.OK)
	require.GreaterOrEqual(t, rep.Reconnects, 1)
	require.NotEqual(t, rep.Partial, rep.Answer, "the cut came in the middle of the stream")
	for _, p := range rep.Posts {
		require.Equal(t, rep.Key, p.Key, "one key before and after the cut")
	}
	require.Regexp(t, `^1-[0-9a-f]{8}-[0-9]+$`, *rep.Posts[len(rep.Posts)-1].LastEventID)

	c := newClient(t)
	res, rec := lookup(t, c, s, "demo", "dev-demo-key", rep.Key)
	require.Equal(t, http.StatusOK, res.status, res.String())
	require.Equal(t, "succeeded", rec.Status)
	require.Equal(t, 1, rec.AttemptCount, "the operation ran once")
	var env struct {
		Data struct {
			Text string `json:"text"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(rec.Response, &env))
	require.Equal(t, env.Data.Text, rep.Answer, "the page shows the stored answer whole, each word once")
	metrics := do(t, c, s, request{method: http.MethodGet, path: "/metrics"})
	require.Equal(t, 1, metricValue(t, string(metrics.body), `idemguard_operations_total{outcome="succeeded",scope="demo"}`))
}
