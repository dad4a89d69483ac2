package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sdkGoBlocks are README's marked ```go blocks of the providers' SDKs:
// statements, which TestSDKReadmeExamples runs inside a function of a
// module of its own (not the outside module's files).
var sdkGoBlocks = []string{"go-openai-example"}

// readmeBlock returns the block of lang between the name markers of
// README.md or docs/SDK.md (the first that has them).
func readmeBlock(t *testing.T, name, lang string) string {
	t.Helper()
	for _, f := range []string{"../README.md", "../docs/SDK.md"} {
		doc, err := os.ReadFile(f)
		require.NoError(t, err)
		_, rest, ok := strings.Cut(string(doc), "<!-- "+name+":start -->\n```"+lang+"\n")
		if !ok {
			continue
		}
		block, _, ok := strings.Cut(rest, "```\n<!-- "+name+":end -->")
		require.True(t, ok, "%s: %s:start without %s:end", f, name, name)
		return block
	}
	t.Fatalf("no %s:start marker before a ```%s block in README.md or docs/SDK.md", name, lang)
	return ""
}

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
	for _, ex := range sdkExamples {
		t.Run(ex.name+"/go", func(t *testing.T) { runGoExample(t, s, ex.goBlock, ex.goImports) })
		t.Run(ex.name+"/ts", func(t *testing.T) { runTSExample(t, s, ex.tsBlock) })
	}
	require.EqualValues(t, 2, openaiLLM.calls.Load(), "one upstream call per language")
	require.EqualValues(t, 2, anthropicLLM.calls.Load(), "one upstream call per language")
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
	_, err = script.WriteString(sdkTSPrelude + readmeBlock(t, block, "ts") + "console.log(JSON.stringify(answer));\n")
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
	main := strings.Replace(strings.Replace(sdkGoMain, "%s", imports, 1), "%s", readmeBlock(t, name, "go"), 1)
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
