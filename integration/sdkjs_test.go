package integration

import (
	"context"
	"encoding/json"
	"fmt"
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
	db, llm, s := newOpenAIDoor(t)
	runSDKJS(t, s, "openai.mjs", "/openai/v1", []string{"w0 w1 w2 ", "w0 w1 w2 "}, &llm.calls, &llm.gate, &llm.gateFrom)
	requireNoCanary(t, db, s)
}

// runSDKJS runs script against s's door at base, the upstream's concurrent
// pair held (see holdConcurrentPair), and requires its report (stream: the
// streams' text) and one upstream call per key.
func runSDKJS(t *testing.T, s *service, script, base string, stream []string,
	calls *atomic.Int32, gate *atomic.Pointer[chan struct{}], gateFrom *atomic.Int32) {
	t.Helper()
	holdConcurrentPair(t, calls, gate, gateFrom)
	var r sdkJSReport
	runSDKScript(t, script, map[string]string{"BASE_URL": s.url(base), "API_KEY": acmeKey, "PROMPT": prompt}, &r)
	requireSDKJSReport(t, r, stream)
	require.EqualValues(t, 3, calls.Load(), "one upstream call per key")
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
	db, llm, s := newAnthropicDoor(t)
	runSDKJS(t, s, "anthropic.mjs", "/anthropic", []string{"w0 w1 ", "w0 w1 "}, &llm.calls, &llm.gate, &llm.gateFrom)
	rows := dumpRows(t, db)
	for _, secret := range []string{sdkCanary, claudeModel, prompt} {
		require.NotContains(t, rows, secret)
		require.NotContains(t, s.logs.String(), secret)
	}
}

// sdkBlockFiles are the documents the SDK examples are taken from.
var sdkBlockFiles = []string{"../README.md", "../docs/SDK.md"}

// sdkGoBlocks are README's marked ```go blocks of the providers' SDKs:
// statements, which TestSDKReadmeExamples runs inside a function of a
// module of its own (not the outside module's files).
var sdkGoBlocks = []string{"go-openai-example"}

// sdkGoMain wraps a Go SDK block (which uses ctx, idemguardURL and
// tenantAPIKey, and sets answer and err) into a program that prints the
// answer's raw JSON; the SDK's imports go first.
const sdkGoMain = `package main

import (
	"context"
	"fmt"
	"os"

%s
)

func main() {
	ctx, idemguardURL, tenantAPIKey := context.Background(), os.Getenv("IDEMGUARD_URL"), os.Getenv("IDEMGUARD_API_KEY")
%s
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(answer.RawJSON())
}
`

// sdkTSPrelude gives README's TypeScript SDK block (plain JavaScript, run
// as a module by node) its two names, and prints its answer.
const sdkTSPrelude = "const idemguardURL = process.env.IDEMGUARD_URL, tenantAPIKey = process.env.IDEMGUARD_API_KEY;\n"

// sdkExamples are the marked examples of README.md and docs/SDK.md, per
// provider: the Go block and its SDK's imports, the TypeScript block.
var sdkExamples = []struct {
	name, goBlock, goImports, tsBlock string
}{
	{"openai", "go-openai-example", "\t\"github.com/openai/openai-go/v3\"\n\t\"github.com/openai/openai-go/v3/option\"", "ts-openai-example"},
	{"anthropic", "go-anthropic-example", "\t\"github.com/anthropics/anthropic-sdk-go/v2\"\n\t\"github.com/anthropics/anthropic-sdk-go/v2/option\"",
		"ts-anthropic-example"},
}

// The SDK examples, as written, against the built binary: each run twice
// makes one upstream call and prints the same answer. Go runs as tenant
// acme, TypeScript as globex: the two languages' bodies of one example
// need not be the same bytes (Anthropic's Go SDK sends text blocks where
// the TypeScript example sends a string), and one key with two bodies is a
// 422, as it should be.
func TestSDKReadmeExamples(t *testing.T) {
	t.Parallel()
	db := database(t)
	openaiLLM, anthropicLLM := newSDKLLM(t), newAnthropicLLM(t)
	s := startService(t, productionEnv(db.DSN), fmt.Sprintf(
		"openai: {base_url: %q, model: %q, timeout: 20s}\nanthropic: {base_url: %q, model: %q, timeout: 20s}\nscopes:\n"+
			"  - {name: chat, operation: openai_chat}\n  - {name: claude, operation: anthropic_messages}\ndoors:\n"+
			"  - {wire: openai, prefix: /openai/v1, scope: chat}\n  - {wire: anthropic, prefix: /anthropic/v1, scope: claude}\n",
		openaiLLM.srv.URL+"/v1", model, anthropicLLM.srv.URL+"/v1", claudeModel))
	ran := map[string]int{} // the languages that ran each provider's example (a TypeScript one skips without its SDK outside CI)
	for _, ex := range sdkExamples {
		t.Run(ex.name+"/go", func(t *testing.T) { runGoExample(t, s, ex.goBlock, ex.goImports); ran[ex.name]++ })
		t.Run(ex.name+"/ts", func(t *testing.T) { runTSExample(t, s, ex.tsBlock); ran[ex.name]++ })
	}
	require.EqualValues(t, ran["openai"], openaiLLM.calls.Load(), "one upstream call per language")
	require.EqualValues(t, ran["anthropic"], anthropicLLM.calls.Load(), "one upstream call per language")
}

// runGoExample builds the Go block and runs it twice: the same answer.
func runGoExample(t *testing.T, s *service, block, imports string) {
	bin := buildSDKGoExample(t, block, imports)
	var outs []string
	for range 2 {
		cmd := exec.Command(bin)
		cmd.Env = []string{"IDEMGUARD_URL=" + s.url(""), "IDEMGUARD_API_KEY=" + acmeKey}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		outs = append(outs, string(out))
	}
	require.Equal(t, outs[0], outs[1])
	require.Contains(t, outs[0], `"id":`)
}

// runTSExample runs the TypeScript block (plain JavaScript) twice with
// node in the SDK test package: the same answer.
func runTSExample(t *testing.T, s *service, block string) {
	script, err := os.CreateTemp(sdkJSDir, "readme-*.mjs")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Remove(script.Name()) })
	_, err = script.WriteString(sdkTSPrelude + readmeBlock(t, block, "ts", sdkBlockFiles...) + "console.log(JSON.stringify(answer));\n")
	require.NoError(t, err)
	require.NoError(t, script.Close())
	var first, second map[string]any
	vars := map[string]string{"IDEMGUARD_URL": s.url(""), "IDEMGUARD_API_KEY": globexKey}
	runSDKScript(t, filepath.Base(script.Name()), vars, &first)
	runSDKScript(t, filepath.Base(script.Name()), vars, &second)
	require.Equal(t, first, second)
	require.NotEmpty(t, first["id"])
}

// buildSDKGoExample builds the Go SDK block name in a module of its own,
// offline (the checkout's requirements pin the SDK).
func buildSDKGoExample(t *testing.T, name, imports string) string {
	t.Helper()
	dir := t.TempDir()
	checkout, err := filepath.Abs("..")
	require.NoError(t, err)
	main := strings.Replace(strings.Replace(sdkGoMain, "%s", imports, 1), "%s", readmeBlock(t, name, "go", sdkBlockFiles...), 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o600))
	writeOutsideGoMod(t, dir, checkout)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "example")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOSUMDB=off")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building README's Go SDK example:\n%s", out)
	return bin
}
