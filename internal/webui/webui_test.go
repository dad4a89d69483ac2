package webui

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHandler(t *testing.T) {
	t.Parallel()
	h := Handler()
	get := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w
	}
	w := get(http.MethodGet, "/")
	require.Equal(t, http.StatusOK, w.Code)
	require.Equal(t, "text/html; charset=utf-8", w.Header().Get("Content-Type"))
	require.Contains(t, w.Body.String(), `<button id="generate"`)
	require.Contains(t, w.Body.String(), `src="/assets/demo.js"`)
	require.Contains(t, w.Header().Get("Content-Security-Policy"), "script-src 'self'")

	w = get(http.MethodGet, "/assets/demo.js")
	require.Equal(t, http.StatusOK, w.Code)
	require.Contains(t, w.Header().Get("Content-Type"), "javascript")
	require.Contains(t, w.Body.String(), "Idempotency-Key")

	require.Equal(t, http.StatusOK, get(http.MethodHead, "/").Code)
	for _, p := range []string{"/assets/nope.js", "/index.html", "/assets/../webui.go", "/other"} {
		require.Equal(t, http.StatusNotFound, get(http.MethodGet, p).Code, p)
	}
}

// TestWebPackage runs the web/ package's checks: the TypeScript type check,
// the client's unit tests (vitest) and the freshness check, which fails when
// the committed src/openapi.gen.ts or dist/ (embedded above) no longer match
// docs/openapi.yaml and the page's sources. It needs node and `npm ci` in
// web/ (.ci/run does both); without them it skips, except under CI=true.
func TestWebPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the npm checks")
	}
	web, err := filepath.Abs("../../web")
	require.NoError(t, err)
	_, errNode := exec.LookPath("npm")
	_, errModules := os.Stat(filepath.Join(web, "node_modules", ".bin", "vitest"))
	if errNode != nil || errModules != nil {
		msg := "npm or web/node_modules missing (run `npm ci` in web/, or .ci/run)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	cmd := exec.Command("npm", "test", "--silent")
	cmd.Dir = web
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "FORCE_COLOR=0")
	out, err := cmd.CombinedOutput()
	t.Logf("npm test in web/:\n%s", out)
	require.NoError(t, err, "npm test failed in web/")
	require.Contains(t, string(out), "check-fresh: ok")
	require.True(t, strings.Contains(string(out), "passed"), "vitest printed no summary")
}
