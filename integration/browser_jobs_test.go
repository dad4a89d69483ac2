package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
	web, err := filepath.Abs("../web")
	require.NoError(t, err)
	chromium := chromiumPath
	if c := os.Getenv("CHROMIUM"); c != "" {
		chromium = c
	}
	var missing []string
	if _, err := exec.LookPath("node"); err != nil {
		missing = append(missing, "node")
	}
	if _, err := os.Stat(filepath.Join(web, "node_modules", "playwright-core")); err != nil {
		missing = append(missing, "web/node_modules (npm ci in web/)")
	}
	if _, err := os.Stat(chromium); err != nil {
		missing = append(missing, chromium+" (apt-get install chromium)")
	}
	if len(missing) > 0 {
		msg := "browser test needs: " + strings.Join(missing, ", ") + "; .ci/run installs them"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}

	s := startService(t, map[string]string{"IDEMGUARD_MODE": "development", "IDEMGUARD_LISTEN": "127.0.0.1:0"}, "")
	out := t.ArtifactDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "browser/jobs.browser.mjs", "--url", s.url(""), "--out", out)
	cmd.Dir = web
	cmd.Env = append(os.Environ(), "CHROMIUM="+chromium)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	require.NoError(t, err, "the browser script failed:\n%s\n%s", stdout, stderr.String())
	lines := strings.Split(strings.TrimSpace(string(stdout)), "\n")
	var rep struct {
		OK              bool     `json:"ok"`
		Key             string   `json:"key"`
		AcceptedAfterMs int      `json:"acceptedAfterMs"`
		CanceledAfterMs int      `json:"canceledAfterMs"`
		Events          []string `json:"events"`
	}
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &rep), "report: %s", stdout)
	t.Logf("browser report: %s", lines[len(lines)-1])
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
