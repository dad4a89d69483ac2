package integration

import (
	"context"
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

// readmeBlock returns README.md's block of lang between the name markers.
func readmeBlock(t *testing.T, name, lang string) string {
	t.Helper()
	doc, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "<!-- "+name+":start -->\n```"+lang+"\n")
	require.True(t, ok, "README.md has no %s:start marker before a ```%s block", name, lang)
	block, _, ok := strings.Cut(rest, "```\n<!-- "+name+":end -->")
	require.True(t, ok, "README.md: %s:start without %s:end", name, name)
	return block
}

// sdkGoMain wraps README's Go SDK block (which uses ctx, idemguardURL and
// tenantAPIKey, and sets answer and err) into a program that prints the
// answer's raw JSON.
const sdkGoMain = `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
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

// README's SDK examples, as written, against the built binary: each run
// twice makes one upstream call and prints the same answer.
func TestSDKReadmeExamples(t *testing.T) {
	t.Parallel()
	db := database(t)
	llm := newSDKLLM(t)
	s := sdkService(t, db, llm)
	env := []string{"IDEMGUARD_URL=" + s.url(""), "IDEMGUARD_API_KEY=" + acmeKey}

	t.Run("go", func(t *testing.T) {
		bin := buildSDKGoExample(t)
		var outs []string
		for range 2 {
			cmd := exec.Command(bin)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			outs = append(outs, string(out))
		}
		require.Equal(t, outs[0], outs[1])
		require.Contains(t, outs[0], `"object":"chat.completion"`)
	})
	t.Run("ts", func(t *testing.T) {
		script, err := os.CreateTemp(sdkJSDir, "readme-*.mjs")
		require.NoError(t, err)
		t.Cleanup(func() { _ = os.Remove(script.Name()) })
		_, err = script.WriteString(sdkTSPrelude + readmeBlock(t, "ts-openai-example", "ts") + "console.log(JSON.stringify(answer));\n")
		require.NoError(t, err)
		require.NoError(t, script.Close())
		var first, second map[string]any
		vars := map[string]string{"IDEMGUARD_URL": s.url(""), "IDEMGUARD_API_KEY": acmeKey}
		runSDKScript(t, filepath.Base(script.Name()), vars, &first)
		runSDKScript(t, filepath.Base(script.Name()), vars, &second)
		require.Equal(t, first, second)
		require.Equal(t, "chat.completion", first["object"])
	})
	// One key across both languages: one upstream call in all.
	require.EqualValues(t, 1, llm.calls.Load())
}

// buildSDKGoExample builds README's Go SDK block in a module of its own,
// offline (the checkout's requirements pin the SDK).
func buildSDKGoExample(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	checkout, err := filepath.Abs("..")
	require.NoError(t, err)
	block := readmeBlock(t, "go-openai-example", "go")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(strings.Replace(sdkGoMain, "%s", block, 1)), 0o600))
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
