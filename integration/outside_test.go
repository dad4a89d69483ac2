package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/testdb"
)

// readmeGoBlock returns the ```go block between <!-- name:start --> and
// <!-- name:end --> of README.md.
func readmeGoBlock(t *testing.T, name string) string {
	t.Helper()
	doc, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "<!-- "+name+":start -->\n```go\n")
	require.True(t, ok, "README.md has no <!-- %s:start --> ```go marker", name)
	block, _, ok := strings.Cut(rest, "```\n<!-- "+name+":end -->")
	require.True(t, ok, "README.md: %s:start without %s:end", name, name)
	return block
}

// buildOutsideModule writes a module of its own (example.com/outside) that
// requires idemguard through a replace to this checkout, holding README's Go
// blocks verbatim and testdata/outside/main.go, and builds it offline: no
// proxy, only the module cache. It returns the binary.
func buildOutsideModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	checkout, err := filepath.Abs("..")
	require.NoError(t, err)
	for file, block := range map[string]string{
		"readme_example.go": "go-example", "readme_gin.go": "go-gin-example", "readme_http.go": "go-http-example",
	} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte(readmeGoBlock(t, block)), 0o600))
	}
	main, err := os.ReadFile("testdata/outside/main.go")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), main, 0o600))

	// The checkout's own requirements pin every dependency to a version in
	// the module cache; its go.sum vouches for them.
	ourMod, err := os.ReadFile(filepath.Join(checkout, "go.mod"))
	require.NoError(t, err)
	var requires strings.Builder
	inRequire := false
	for _, line := range strings.Split(string(ourMod), "\n") {
		switch {
		case strings.HasPrefix(line, "require ("):
			inRequire = true
		case inRequire && line == ")":
			inRequire = false
		case inRequire:
			requires.WriteString(line + "\n")
		}
	}
	gomod := "module example.com/outside\n\ngo 1.26.0\n\n" +
		"require (\n\tgithub.com/idemguard/idemguard v0.0.0-00010101000000-000000000000\n" + requires.String() + ")\n\n" +
		"replace github.com/idemguard/idemguard => " + checkout + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o600))
	sum, err := os.ReadFile(filepath.Join(checkout, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o600))

	bin := filepath.Join(dir, "outside")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOSUMDB=off")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the outside module (README's Go blocks):\n%s", out)
	vet := exec.Command("go", "vet", ".")
	vet.Dir, vet.Env = dir, build.Env
	out, err = vet.CombinedOutput()
	require.NoError(t, err, "go vet of the outside module:\n%s", out)
	return bin
}

// TestOutsideModule: another module can use idemguard as README shows, and
// the middleware holds under 100 concurrent duplicates against MariaDB.
func TestOutsideModule(t *testing.T) {
	t.Parallel()
	bin := buildOutsideModule(t)
	db := testdb.NewEmpty(t) // the program migrates it (mysql.Migrate)

	cmd := exec.Command(bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "OUTSIDE_DSN=" + db.DSN, "OUTSIDE_SECRET=" + secret}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &lockedWriter{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = stdin.Close() // the program serves until stdin closes
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})

	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() string {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "the outside program stopped: %s", stderr.String())
			return l
		case <-time.After(60 * time.Second):
			t.Fatalf("no output from the outside program: %s", stderr.String())
			return ""
		}
	}

	// README's "Using it from Go": the model ran once, the second call replayed.
	require.Equal(t, `readme: succeeded cached=false model_calls=1 {"ok":true,"stopReason":"completed","needsHuman":false,"cached":false,"data":{"copy":"a fine copy of 16 characters"}}`, next())
	require.Equal(t, `readme: succeeded cached=true model_calls=1 {"ok":true,"stopReason":"completed","needsHuman":false,"cached":true,"data":{"copy":"a fine copy of 16 characters"}}`, next())
	listening := next()
	var ginAddr, httpAddr string
	_, err = fmt.Sscanf(listening, "listening gin=%s http=%s", &ginAddr, &httpAddr)
	require.NoError(t, err, "%q", listening)

	for _, app := range []struct{ name, base, path, body, idField, idPrefix string }{
		{"gin", "http://" + ginAddr, "/orders", `{"item":"tea"}`, "orderId", "/orders/"},
		{"net/http", "http://" + httpAddr, "/invoices", `{"amount":12}`, "invoiceId", "/invoices/"},
	} {
		t.Run(app.name, func(t *testing.T) {
			post := func(key, body string) (*http.Response, string) {
				req, err := http.NewRequest(http.MethodPost, app.base+app.path, strings.NewReader(body))
				require.NoError(t, err)
				req.Header.Set("X-Tenant", "acme")
				if key != "" {
					req.Header.Set("Idempotency-Key", key)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Prefer", "wait=30")
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return resp, string(b)
			}

			// README's examples create things: a key is required, never
			// derived from the body (a second identical order is a new one).
			noKey, noKeyBody := post("", app.body)
			require.Equal(t, http.StatusBadRequest, noKey.StatusCode, noKeyBody)

			const n = 100
			type answer struct {
				code                  int
				body, replayed, where string
			}
			answers := make([]answer, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, body := post("same-key", app.body)
					answers[i] = answer{resp.StatusCode, body, resp.Header.Get("Idempotent-Replayed"), resp.Header.Get("Location")}
				}()
			}
			wg.Wait()

			resp, err := http.Get(app.base + "/runs")
			require.NoError(t, err)
			runs, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, "1", string(runs), "the handler body ran once for 100 concurrent requests")

			want := `{"ok":true,"stopReason":"completed","needsHuman":false,"cached":false,"data":{"` + app.idField + `":"` +
				strings.TrimPrefix(app.idPrefix, "/")[:3] + "-1" + `"}}`
			fresh := 0
			for i, a := range answers {
				require.Equal(t, http.StatusCreated, a.code, "answer %d: %s", i, a.body)
				require.Equal(t, app.idPrefix+strings.TrimPrefix(app.idPrefix, "/")[:3]+"-1", a.where, "answer %d", i)
				if a.replayed == "" {
					fresh++
					require.Equal(t, want, a.body, "answer %d", i)
					continue
				}
				require.Equal(t, "true", a.replayed)
				require.Equal(t, strings.Replace(want, `"cached":false`, `"cached":true`, 1), a.body, "answer %d", i)
			}
			require.Equal(t, 1, fresh, "exactly one caller ran the handler; the others got replays")

			resp, body := post("same-key", `{"different":true}`)
			require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, body)
			require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			var p map[string]any
			require.NoError(t, json.Unmarshal([]byte(body), &p))
			require.Equal(t, "urn:idemguard:problem:idempotency-key-reused", p["type"])
		})
	}
}

// lockedWriter collects a process's output for failure messages.
type lockedWriter struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
