package integration

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/browsertest"
)

// browserReport is what web/browser/demo.browser.mjs saw on the page.
type browserReport struct {
	OK          bool `json:"ok"`
	DoubleClick struct {
		Key     string `json:"key"`
		Answer  string `json:"answer"`
		Replays []bool `json:"replays"`
	} `json:"doubleClick"`
	Reload struct {
		KeyBefore string `json:"keyBefore"`
		KeyAfter  string `json:"keyAfter"`
		Answer    string `json:"answer"`
	} `json:"reload"`
	CORS struct {
		Origin string `json:"origin"`
		First  struct {
			KeyRef string `json:"keyRef"`
		} `json:"first"`
	} `json:"cors"`
	Screenshot string `json:"screenshot"`
}

// TestBrowserDemoPage drives the demo page of the built binary (development
// mode) in headless Chromium with playwright-core (web/browser): a double
// click runs the operation once and shows the same answer twice, the second
// a replay; a reload during the call resumes it with the same key; a fetch
// from another loopback origin passes the CORS preflight and reads the
// idempotency headers. Then it checks the server's side: one execution per
// action (key lookup, /metrics) and the preflight in the request log.
//
// It needs node, `npm ci` in web/ and Chromium (.ci/run installs them);
// without them it skips, except under CI=true. Screenshots go to the test's
// artifact directory (go test -artifacts keeps them).
func TestBrowserDemoPage(t *testing.T) {
	t.Parallel()
	web, chromium := browsertest.Tools(t, "../web")

	s := startService(t, map[string]string{"IDEMGUARD_MODE": "development", "IDEMGUARD_LISTEN": "127.0.0.1:0"}, "")
	out := t.ArtifactDir()
	var rep browserReport
	browsertest.Run(t, web, chromium, &rep, "demo.browser.mjs", "--url", s.url(""), "--out", out)

	// What the page showed (the script checked it too).
	require.True(t, rep.OK)
	require.ElementsMatch(t, []bool{false, true}, rep.DoubleClick.Replays)
	require.NotEmpty(t, rep.DoubleClick.Answer)
	require.Equal(t, rep.Reload.KeyBefore, rep.Reload.KeyAfter, "the reload reused the key")
	require.FileExists(t, filepath.Join(out, "demo.png"))
	require.FileExists(t, filepath.Join(out, "demo-after-reload.png"))

	// The server's side: each action ran once, and the stored answer is the
	// one the page showed.
	c := newClient(t)
	for _, a := range []struct{ key, answer string }{
		{rep.DoubleClick.Key, rep.DoubleClick.Answer},
		{rep.Reload.KeyAfter, rep.Reload.Answer},
	} {
		res, rec := lookup(t, c, s, "demo", "dev-demo-key", a.key)
		require.Equal(t, http.StatusOK, res.status, res.String())
		require.Equal(t, "succeeded", rec.Status)
		require.Equal(t, 1, rec.AttemptCount, "one execution for key %s", a.key)
		var env struct {
			Data struct {
				Text string `json:"text"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(rec.Response, &env))
		require.Equal(t, a.answer, env.Data.Text)
	}
	metrics := do(t, c, s, request{method: http.MethodGet, path: "/metrics"})
	require.Equal(t, http.StatusOK, metrics.status)
	// Three actions (double click, reload, the other origin's key): three executions.
	require.Equal(t, 3, metricValue(t, string(metrics.body), `idemguard_claims_total{scope="demo"}`))
	require.Equal(t, 3, metricValue(t, string(metrics.body), `idemguard_operations_total{outcome="succeeded",scope="demo"}`))

	// The browser sent a preflight from the other origin, and it passed (the
	// log is read from the process's stderr as it comes).
	eventually(t, 10*time.Second, "a CORS preflight in the request log", func() bool {
		return preflights(t, s.logs.String()) > 0
	})
}

// preflights counts the OPTIONS requests in the request log; each must have
// been answered 204.
func preflights(t *testing.T, logs string) int {
	n := 0
	for _, line := range strings.Split(logs, "\n") {
		var l struct {
			Msg, Method string
			Status      int
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "http: request" && l.Method == http.MethodOptions {
			require.Equal(t, http.StatusNoContent, l.Status, line)
			n++
		}
	}
	return n
}

// metricValue reads one sample of the Prometheus text exposition.
func metricValue(t *testing.T, body, series string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	require.NotNil(t, m, "no sample %s in /metrics", series)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return int(v)
}
