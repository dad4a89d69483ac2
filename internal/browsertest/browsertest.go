// Package browsertest runs the drivers of web/browser with node in
// headless Chromium, for the Go tests that check a running service's
// pages (integration's browser tests, the operator page's test).
package browsertest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// chromiumPath is Debian's Chromium (apt-get install chromium); CHROMIUM
// overrides it.
const chromiumPath = "/usr/bin/chromium"

// Tools returns the absolute web/ directory (web is its path from the
// test's package) and the Chromium binary, or skips the test (fails it
// under CI=true) when node, web/node_modules or Chromium is missing;
// .ci/run installs them.
func Tools(t *testing.T, web string) (dir, chromium string) {
	t.Helper()
	dir, err := filepath.Abs(web)
	require.NoError(t, err)
	chromium = chromiumPath
	if c := os.Getenv("CHROMIUM"); c != "" {
		chromium = c
	}
	var missing []string
	if _, err := exec.LookPath("node"); err != nil {
		missing = append(missing, "node")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core")); err != nil {
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
	return dir, chromium
}

// Run runs web/browser/<script> with node in headless Chromium (args
// follow it) and decodes the JSON report on the last line of its output
// into report.
func Run(t *testing.T, web, chromium string, report any, script string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"browser/" + script}, args...)...)
	cmd.Dir = web
	cmd.Env = append(os.Environ(), "CHROMIUM="+chromium)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	require.NoError(t, err, "the browser script failed:\n%s\n%s", stdout, stderr.String())
	lines := strings.Split(strings.TrimSpace(string(stdout)), "\n")
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), report), "report: %s", stdout)
	t.Logf("browser report: %s", lines[len(lines)-1])
}
