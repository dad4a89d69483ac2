package integration

import (
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/browsertest"
)

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
	web, chromium := browsertest.Tools(t, "../web")

	s := startService(t, map[string]string{"IDEMGUARD_MODE": "development", "IDEMGUARD_LISTEN": "127.0.0.1:0"}, "")
	out := t.ArtifactDir()
	var rep struct {
		OK              bool     `json:"ok"`
		Key             string   `json:"key"`
		AcceptedAfterMs int      `json:"acceptedAfterMs"`
		CanceledAfterMs int      `json:"canceledAfterMs"`
		Events          []string `json:"events"`
	}
	browsertest.Run(t, web, chromium, &rep, "jobs.browser.mjs", "--url", s.url(""), "--out", out)
	require.True(t, rep.OK)
	require.Less(t, rep.AcceptedAfterMs, 10_000, "the submission answered before the 30-second job ended")
	// The demo job's heartbeat (and so its cancel check) comes every 2 s.
	require.Less(t, rep.CanceledAfterMs, 2000+3000)
	require.Equal(t, "canceled", rep.Events[len(rep.Events)-1])
	require.FileExists(t, filepath.Join(out, "job-reattached.png"))

	c := newClient(t)
	res, rec := lookup(t, c, s, "demo-job", "dev-demo-key", rep.Key)
	require.Equal(t, http.StatusOK, res.status, res.String())
	require.Equal(t, "failed", rec.Status)
	require.Equal(t, 0, rec.AttemptCount, "a canceled attempt is not counted")
	require.Contains(t, string(rec.Response), `"stopReason":"canceled"`)
}
