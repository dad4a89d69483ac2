package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sdkJSDir holds the npm SDKs' test package (its lockfile pins them);
// .ci/run installs it with npm ci.
const sdkJSDir = "testdata/sdk-js"

// runSDKScript runs node on script of sdkJSDir with env and decodes the
// JSON report on its last line into report. Without node or the package's
// node_modules the test skips (fails under CI=true).
func runSDKScript(t *testing.T, script string, env map[string]string, report any) {
	t.Helper()
	var missing []string
	if _, err := exec.LookPath("node"); err != nil {
		missing = append(missing, "node")
	}
	if _, err := os.Stat(filepath.Join(sdkJSDir, "node_modules")); err != nil {
		missing = append(missing, "integration/"+sdkJSDir+"/node_modules (npm ci there)")
	}
	if len(missing) > 0 {
		msg := "the SDK test needs: " + strings.Join(missing, ", ") + "; .ci/run installs them"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = sdkJSDir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	require.NoError(t, err, "node %s failed:\n%s\n%s", script, stdout, stderr.String())
	lines := strings.Split(strings.TrimSpace(string(stdout)), "\n")
	require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), report), "report: %s", stdout)
	for _, secret := range []string{sdkCanary, streamCanary, model, claudeModel} {
		require.NotContains(t, string(stdout), secret, "an answer the SDK got")
	}
}

// sdkJSReport is what openai.mjs or anthropic.mjs saw.
type sdkJSReport struct {
	Plain struct {
		First, Second                 json.RawMessage
		FirstReplayed, SecondReplayed *string
		Raw                           string
	}
	Mismatch struct {
		Thrown, Unprocessable bool
		Status                int
		Message               string
	}
	Stream     []string
	Concurrent []json.RawMessage
}

// The openai npm SDK, unmodified: a call twice with one key runs once and
// the second is marked replayed; a different body under the key is the
// SDK's UnprocessableEntityError; a stream read with the SDK's reader
// replays the same text; two calls of one key at once run once and both
// succeed; the upstream's private fields reach no answer, row or log.
func TestSDKOpenAIJS(t *testing.T) {
	t.Parallel()
	db := database(t)
	llm := newSDKLLM(t)
	// The concurrent pair: the first call is held upstream a moment, so
	// that the second is likely to arrive while it runs (its answer is
	// the same either way: waited for, or replayed).
	holdConcurrentPair(t, &llm.calls, &llm.gate, &llm.gateFrom)
	s := sdkService(t, db, llm)
	var r sdkJSReport
	runSDKScript(t, "openai.mjs", map[string]string{"BASE_URL": s.url("/openai/v1"), "API_KEY": acmeKey, "PROMPT": prompt}, &r)

	requireSDKJSReport(t, r, []string{"w0 w1 w2 ", "w0 w1 w2 "})
	require.EqualValues(t, 3, llm.calls.Load(), "one upstream call per key")
	requireNoCanary(t, db, s)
}

// requireSDKJSReport: the plain pair equal, the second replayed, the raw
// replay the same object; the mismatch the SDK's 422 error with a readable
// message; both streams' text; the concurrent pair equal.
func requireSDKJSReport(t *testing.T, r sdkJSReport, stream []string) {
	t.Helper()
	require.JSONEq(t, string(r.Plain.First), string(r.Plain.Second))
	require.Nil(t, r.Plain.FirstReplayed)
	require.Equal(t, "true", *r.Plain.SecondReplayed)
	require.JSONEq(t, string(r.Plain.First), r.Plain.Raw)
	require.True(t, r.Mismatch.Thrown && r.Mismatch.Unprocessable, "%+v", r.Mismatch)
	require.Equal(t, http.StatusUnprocessableEntity, r.Mismatch.Status)
	require.Contains(t, r.Mismatch.Message, "different request body")
	require.Equal(t, stream, r.Stream)
	require.Len(t, r.Concurrent, 2)
	require.JSONEq(t, string(r.Concurrent[0]), string(r.Concurrent[1]))
}

// holdConcurrentPair holds the upstream's third call (the plain call, the
// stream, then the concurrent pair) a moment, so that the pair's second
// call is likely to arrive while the first runs (its answer is the same
// either way: waited for, or replayed).
func holdConcurrentPair(t *testing.T, calls *atomic.Int32, gate *atomic.Pointer[chan struct{}], gateFrom *atomic.Int32) {
	t.Helper()
	g := make(chan struct{})
	gateFrom.Store(3)
	gate.Store(&g)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		defer close(g)
		for calls.Load() < 3 {
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
		time.Sleep(300 * time.Millisecond)
	}()
}

// The @anthropic-ai/sdk npm SDK, unmodified, as TestSDKOpenAIJS.
func TestSDKAnthropicJS(t *testing.T) {
	t.Parallel()
	db := database(t)
	llm := newAnthropicLLM(t)
	holdConcurrentPair(t, &llm.calls, &llm.gate, &llm.gateFrom)
	s := anthropicService(t, db, llm)
	var r sdkJSReport
	runSDKScript(t, "anthropic.mjs", map[string]string{"BASE_URL": s.url("/anthropic"), "API_KEY": acmeKey, "PROMPT": prompt}, &r)
	requireSDKJSReport(t, r, []string{"w0 w1 ", "w0 w1 "})
	require.EqualValues(t, 3, llm.calls.Load(), "one upstream call per key")
	rows := dumpRows(t, db)
	for _, secret := range []string{sdkCanary, claudeModel, prompt} {
		require.NotContains(t, rows, secret)
		require.NotContains(t, s.logs.String(), secret)
	}
}
