package integration

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/browsertest"
)

// demoService finds the browser tools (skipping the test without them, as
// browsertest.Tools says) and starts the service in development mode, where it
// serves the demo page at /.
func demoService(t *testing.T) (web, chromium string, s *service) {
	t.Helper()
	web, chromium = browsertest.Tools(t, "../web")
	s = startService(t, map[string]string{"IDEMGUARD_MODE": "development", "IDEMGUARD_LISTEN": "127.0.0.1:0"}, "")
	return web, chromium, s
}

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
	web, chromium, s := demoService(t)
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
		rec := demoKey(t, c, s, "demo", a.key, "succeeded")
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

// TestBrowserKeepsKeyUntilOutcomeKnown drives the demo page in headless Chromium
// (web/browser/keepkey.browser.mjs): the first request runs the operation but its answer is
// lost, the client's retry is refused with 401, and the user clicks again. The page must send one
// key all three times and show the replay; the server must have run the operation once.
//
// It needs node, `npm ci` in web/ and Chromium (.ci/run installs them); without them it skips,
// except under CI=true.
func TestBrowserKeepsKeyUntilOutcomeKnown(t *testing.T) {
	t.Parallel()
	web, chromium, s := demoService(t)
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
	rec := demoKey(t, c, s, "demo", rep.Key, "succeeded")
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
	web, chromium, s := demoService(t)
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
	rec := demoKey(t, c, s, "demo", rep.Key, "succeeded")
	require.Equal(t, 1, rec.AttemptCount, "the operation ran once")
	metrics := do(t, c, s, request{method: http.MethodGet, path: "/metrics"})
	require.Equal(t, 1, metricValue(t, string(metrics.body), `idemguard_operations_total{outcome="succeeded",scope="demo"}`))
}

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
	web, chromium, s := demoService(t)
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
	rec := demoKey(t, c, s, "demo", rep.Key, "succeeded")
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

// TestBrowserDemoJob drives the long-job part of the demo page of the built
// binary (development mode, the 30-second demo-job scope) in headless
// Chromium (web/browser/jobs.browser.mjs): the submission answers at once,
// a reload reattaches to the same key and keeps following its events, and
// Cancel ends it canceled. Then the server's side: the key is failed with
// stopReason canceled, the attempt not counted.
//
// Like TestBrowserDemoPage it needs node, `npm ci` in web/ and Chromium,
// and skips without them except under CI=true.
func TestBrowserDemoJob(t *testing.T) {
	t.Parallel()
	var rep struct {
		OK              bool     `json:"ok"`
		Key             string   `json:"key"`
		AcceptedAfterMs int      `json:"acceptedAfterMs"`
		CanceledAfterMs int      `json:"canceledAfterMs"`
		Events          []string `json:"events"`
	}
	s, out := runJobDriver(t, "jobs.browser.mjs", &rep)
	require.True(t, rep.OK)
	require.Less(t, rep.AcceptedAfterMs, 10_000, "the submission answered before the 30-second job ended")
	// The demo job's heartbeat (and so its cancel check) comes every 2 s.
	require.Less(t, rep.CanceledAfterMs, 2000+3000)
	require.Equal(t, "canceled", rep.Events[len(rep.Events)-1])
	require.FileExists(t, filepath.Join(out, "job-reattached.png"))

	c := newClient(t)
	rec := demoKey(t, c, s, "demo-job", rep.Key, "failed")
	require.Equal(t, 0, rec.AttemptCount, "a canceled attempt is not counted")
	require.Contains(t, string(rec.Response), `"stopReason":"canceled"`)
}

// TestBrowserJobProgress drives the demo page's job progress in headless
// Chromium (web/browser/progress.browser.mjs): a tab opened from the one
// that started the 30-second demo job follows it, its progress bar
// advances, survives a reload, ends full, and a reload after the end still
// shows the final state. Then the server's side: the row holds the last
// progress. Needs node, `npm ci` in web/ and Chromium, like
// TestBrowserDemoPage.
func TestBrowserJobProgress(t *testing.T) {
	t.Parallel()
	var rep struct {
		OK          bool    `json:"ok"`
		Key         string  `json:"key"`
		Advanced    []int64 `json:"advanced"`
		AfterReload int64   `json:"afterReload"`
	}
	s, out := runJobDriver(t, "progress.browser.mjs", &rep)
	require.True(t, rep.OK)
	require.Len(t, rep.Advanced, 2)
	require.Less(t, rep.Advanced[0], rep.Advanced[1], "the bar advanced")
	require.GreaterOrEqual(t, rep.AfterReload, rep.Advanced[1])
	require.FileExists(t, filepath.Join(out, "job-progress-final.png"))

	c := newClient(t)
	demoKey(t, c, s, "demo-job", rep.Key, "succeeded")
}

// demoKey looks key up in scope with the demo's API key, and requires it
// found and in status.
func demoKey(t *testing.T, c *http.Client, s *service, scope, key, status string) keyRecord {
	t.Helper()
	res, rec := lookup(t, c, s, scope, "dev-demo-key", key)
	require.Equal(t, http.StatusOK, res.status, res.String())
	require.Equal(t, status, rec.Status)
	return rec
}

// runJobDriver runs script, a job driver of web/browser, against a new demo
// service with the test's artifact directory as its --out, into rep; it
// returns the service and the directory.
func runJobDriver(t *testing.T, script string, rep any) (*service, string) {
	t.Helper()
	web, chromium, s := demoService(t)
	out := t.ArtifactDir()
	browsertest.Run(t, web, chromium, rep, script, "--url", s.url(""), "--out", out)
	return s, out
}
