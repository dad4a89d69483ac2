package webui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestClientPackageInstalls packs web/ as npm would publish it (`npm pack`, whose prepack builds
// dist/), installs the tarball offline into a fresh project, imports it from an .mjs file, and
// type-checks TypeScript against it (web/node_modules/.bin/tsc, NodeNext and Bundler resolution):
// a file using the API, and every ```ts example of web/README.md. The pack runs in a copy of
// web/, so the checkout gets no dist/. It needs node, npm and `npm ci` in web/; without them it
// skips, except under CI=true.
func TestClientPackageInstalls(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: skipping the npm pack check")
	}
	web, err := filepath.Abs("../../web")
	require.NoError(t, err)
	var missing []string
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	tsc := filepath.Join(web, "node_modules", ".bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		missing = append(missing, "web/node_modules (npm ci in web/)")
	}
	if len(missing) > 0 {
		msg := "the npm pack check needs: " + strings.Join(missing, ", ") + "; .ci/run installs them"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}

	// 1. Pack a copy of web/ (without node_modules and dist; node_modules linked back).
	src := filepath.Join(t.TempDir(), "web")
	copyTree(t, web, src, "node_modules", "dist")
	require.NoError(t, os.Symlink(filepath.Join(web, "node_modules"), filepath.Join(src, "node_modules")))
	out := t.TempDir()
	packed := npm(t, src, "pack", "--json", "--pack-destination", out)
	var pack []struct {
		Filename string `json:"filename"`
		Files    []struct {
			Path string `json:"path"`
		} `json:"files"`
	}
	require.NoError(t, json.Unmarshal(jsonOf(packed), &pack), "npm pack --json printed:\n%s", packed)
	require.Len(t, pack, 1)
	var files []string
	for _, f := range pack[0].Files {
		files = append(files, f.Path)
	}
	for _, want := range []string{"package.json", "README.md", "LICENSE", "dist/index.js", "dist/index.d.ts", "dist/client.js", "dist/client.d.ts", "dist/openapi.gen.d.ts"} {
		require.Contains(t, files, want, "the tarball lacks %s", want)
	}
	for _, f := range files {
		for _, never := range []string{"test/", "demo/", "browser/", "scripts/", "node_modules/", "tsconfig"} {
			require.False(t, strings.HasPrefix(f, never), "the tarball carries %s", f)
		}
	}
	license, err := os.ReadFile("../../LICENSE")
	require.NoError(t, err)
	webLicense, err := os.ReadFile(filepath.Join(web, "LICENSE"))
	require.NoError(t, err)
	require.Equal(t, string(license), string(webLicense), "web/LICENSE is a copy of the repository's LICENSE")

	// 2. Install it, offline, into a fresh project.
	app := t.TempDir()
	writeFile(t, app, "package.json", `{"name": "consumer", "version": "1.0.0", "private": true, "type": "module"}`)
	npm(t, app, "install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", filepath.Join(out, pack[0].Filename))
	require.FileExists(t, filepath.Join(app, "node_modules", "@idemguard", "client", "dist", "index.js"))

	// 3. Import it from JavaScript and use it against a fake server.
	writeFile(t, app, "consumer.mjs", `import { run, pendingKey, canonicalJSON, outcomeKnown, IdemguardError } from "@idemguard/client";
import pkg from "@idemguard/client/package.json" with { type: "json" };
const m = new Map();
const store = { getItem: (k) => m.get(k) ?? null, setItem: (k, v) => void m.set(k, v), removeItem: (k) => void m.delete(k) };
const seen = [];
const fetch = async (url, init) => {
  seen.push(init.headers["Idempotency-Key"]);
  if (seen.length === 1) throw new TypeError("Failed to fetch");
  return new Response(JSON.stringify({ ok: true, stopReason: "completed", needsHuman: false, cached: true, data: { text: "hi" } }), { status: 200 });
};
const res = await run("chat", { b: 1, a: 2 }, { token: "t", baseUrl: "http://guard.test", store, fetch, sleep: async () => {} });
if (res.envelope.data.text !== "hi" || seen.length !== 2 || seen[0] !== seen[1]) throw new Error("unexpected: " + JSON.stringify({ res, seen }));
if (pendingKey("chat", { a: 2, b: 1 }, { store }) !== null) throw new Error("key not released");
if (canonicalJSON({ b: 1, a: 2 }) !== '{"a":2,"b":1}' || outcomeKnown(401) || typeof IdemguardError !== "function") throw new Error("exports");
console.log("consumer.mjs: ok", pkg.name);
`)
	js := run(t, app, "node", "consumer.mjs")
	require.Contains(t, js, "consumer.mjs: ok @idemguard/client")

	// 4. Type-check TypeScript against the installed package: its types resolve through
	//    "exports" (an unresolved import would be an error), and are not any (the
	//    @ts-expect-error lines must each be an error).
	writeFile(t, app, "consumer.ts", `import { run, lookup, IdemguardError, type RunResult, type RunOptions, type KeyRecord } from "@idemguard/client";
const options: RunOptions = { token: async () => "jwt", baseUrl: "https://guard.example.com", waitSeconds: 5 };
export async function generate(text: string): Promise<string | undefined> {
  try {
    const res: RunResult = await run("chat", { messages: [{ role: "user", content: text }] }, options);
    const rec: KeyRecord = await lookup("chat", res.keyRef, options);
    return rec.status === "succeeded" ? String(res.envelope.data?.["text"]) : undefined;
  } catch (e) {
    if (e instanceof IdemguardError && e.retryable) return e.key;
    throw e;
  }
}
// @ts-expect-error: token is required
void run("chat", {}, { baseUrl: "x" });
// @ts-expect-error: cached is a boolean
export const wrong: string = ({} as RunResult).cached;
`)
	// The README's examples, with declarations of the page's own names they use.
	writeFile(t, app, "page.d.ts", `declare const button: HTMLButtonElement;
declare const box: HTMLTextAreaElement;
declare const auth: { getAccessToken(): Promise<string> };
declare const draftId: string;
declare const input: unknown;
declare function show(...args: unknown[]): void;
declare function showRetry(message: string): void;
declare function showError(message: string): void;
`)
	readme, err := os.ReadFile(filepath.Join(web, "README.md"))
	require.NoError(t, err)
	examples := regexp.MustCompile("(?s)```ts\n(.*?)```").FindAllSubmatch(readme, -1)
	require.GreaterOrEqual(t, len(examples), 3, "web/README.md shows at least three TypeScript examples")
	for i, ex := range examples {
		writeFile(t, app, fmt.Sprintf("readme-%d.ts", i+1), string(ex[1])+"\nexport {};\n")
	}
	writeFile(t, app, "tsconfig.json", `{
  "compilerOptions": {
    "target": "ES2022", "module": "NodeNext", "moduleResolution": "NodeNext",
    "lib": ["ES2022", "DOM", "DOM.Iterable"], "types": [],
    "strict": true, "noEmit": true, "skipLibCheck": false
  },
  "include": ["*.ts"]
}`)
	run(t, app, tsc, "-p", "tsconfig.json")
	run(t, app, tsc, "-p", "tsconfig.json", "--module", "ESNext", "--moduleResolution", "Bundler")
}

// npm runs npm with args in dir and returns its stdout; it fails the test on an error.
func npm(t *testing.T, dir string, args ...string) string {
	t.Helper()
	return run(t, dir, "npm", args...)
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "FORCE_COLOR=0", "npm_config_update_notifier=false")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "%s %s in %s:\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), dir, stdout.String(), stderr.String())
	return stdout.String()
}

// jsonOf is the JSON array of npm pack --json's output (lifecycle scripts may print before it).
func jsonOf(s string) []byte {
	if i := strings.Index(s, "\n["); i >= 0 {
		return []byte(s[i+1:])
	}
	return []byte(s)
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
}

// copyTree copies the regular files of src to dst, leaving out the top-level entries named in
// skip.
func copyTree(t *testing.T, src, dst string, skip ...string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		for _, s := range skip {
			if rel == s {
				return filepath.SkipDir
			}
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	require.NoError(t, err)
}
