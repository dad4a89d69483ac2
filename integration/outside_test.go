package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/internal/testlog"
)

// goBlockFiles are the documents whose ```go blocks the outside module is built from.
var goBlockFiles = []string{"../README.md", "../docs/GO.md"}

// readmeBlock returns the block of lang between <!-- name:start --> and
// <!-- name:end --> of the first of files that has them.
func readmeBlock(t *testing.T, name, lang string, files ...string) string {
	t.Helper()
	for _, f := range files {
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
	t.Fatalf("no <!-- %s:start --> ```%s marker in %v", name, lang, files)
	return ""
}

// TestOutsideModuleBuildsEveryGoBlock: every marked ```go block of README.md and docs/GO.md is one the
// outside module builds, so no example can be added that no test compiles.
func TestOutsideModuleBuildsEveryGoBlock(t *testing.T) {
	t.Parallel()
	marker := regexp.MustCompile("<!-- ([a-z-]+):start -->\n```go\n")
	var found []string
	for _, f := range goBlockFiles {
		doc, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range marker.FindAllStringSubmatch(string(doc), -1) {
			found = append(found, m[1])
		}
		require.Equal(t, strings.Count(string(doc), "```go\n"), len(marker.FindAllString(string(doc), -1)),
			"%s: every ```go block is marked, so that it is built", f)
	}
	require.ElementsMatch(t, found, append(slices.Collect(maps.Values(outsideBlocks)), sdkGoBlocks...))
}

// outsideBlocks names the file of the outside module each marked ```go block becomes.
var outsideBlocks = map[string]string{
	"readme_example.go": "go-example", "readme_setup.go": "go-setup-example", "readme_gin.go": "go-gin-example",
	"readme_http.go": "go-http-example", "readme_audit.go": "go-audit-example",
}

// buildOutsideModule writes a module of its own (example.com/outside) that
// requires idemguard through a replace to this checkout, holding the Go
// blocks verbatim and testdata/outside/main.go, and builds it offline: no
// proxy, only the module cache. It returns the binary.
func buildOutsideModule(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	checkout, err := filepath.Abs("..")
	require.NoError(t, err)
	for file, block := range outsideBlocks {
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte(readmeBlock(t, block, "go", goBlockFiles...)), 0o600))
	}
	main, err := os.ReadFile("testdata/outside/main.go")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), main, 0o600))

	writeOutsideGoMod(t, dir, checkout)

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

// writeOutsideGoMod makes dir a module of its own (example.com/outside)
// that requires idemguard through a replace to checkout, built offline.
func writeOutsideGoMod(t *testing.T, dir, checkout string) {
	t.Helper()
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
}

// TestOutsideModule: another module can use idemguard as the docs show, and
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
	stderr := &testlog.Buffer{}
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

	// README's WithIdempotency block: the model ran once, the second call replayed.
	require.Equal(t, `readme: succeeded cached=false model_calls=1 {"ok":true,"stopReason":"completed","needsHuman":false,"cached":false,"data":{"copy":"a fine copy of 16 characters"}}`, next())
	require.Equal(t, `readme: succeeded cached=true model_calls=1 {"ok":true,"stopReason":"completed","needsHuman":false,"cached":true,"data":{"copy":"a fine copy of 16 characters"}}`, next())
	// docs/GO.md's "The audit trail": a claim and a replay, by a hashed user, in the table.
	audit := next()
	require.Regexp(t, `^audit: claimed,replay actor=user:h:[0-9a-f]{32} replay=1$`, audit)
	listening := next()
	var ginAddr, httpAddr string
	_, err = fmt.Sscanf(listening, "listening gin=%s http=%s", &ginAddr, &httpAddr)
	require.NoError(t, err, "%q", listening)

	// The same widget route on gin (docs/GO.md's example) and on net/http: the
	// team's own JSON kept by an allowlist, with its headers.
	t.Run("gin, the team's own JSON", func(t *testing.T) {
		widgetChecks(t, outsideClient{t: t, base: "http://" + ginAddr, path: "/widgets"}, "http://"+ginAddr, "gin-")
	})
	t.Run("net/http, the team's own JSON", func(t *testing.T) {
		widgetChecks(t, outsideClient{t: t, base: "http://" + httpAddr, path: "/widgets"}, "http://"+ginAddr, "http-")
	})

	t.Run("net/http, the envelope", func(t *testing.T) {
		c := outsideClient{t: t, base: "http://" + httpAddr, path: "/invoices"}
		noKey := c.post("", `{"amount":12}`)
		require.Equal(t, http.StatusBadRequest, noKey.code, noKey.body)

		answers := c.storm("same-key", `{"amount":12}`)
		require.Equal(t, "1", c.get("/runs"), "the handler body ran once for 100 concurrent requests")
		want := `{"ok":true,"stopReason":"completed","needsHuman":false,"cached":false,"data":{"invoiceId":"inv-1"}}`
		require.Equal(t, want, onlyFresh(t, answers).body)
		for i, a := range answers {
			require.Equal(t, http.StatusCreated, a.code, "answer %d: %s", i, a.body)
			require.Equal(t, "/invoices/inv-1", a.header.Get("Location"), "answer %d", i)
			if a.header.Get("Idempotent-Replayed") == "true" {
				require.Equal(t, strings.Replace(want, `"cached":false`, `"cached":true`, 1), a.body, "answer %d", i)
			}
		}

		// In the envelope, a handler's 4xx says ok false, first and on replay.
		bad := c.post("bad-1", `{"amount":0}`)
		require.Equal(t, http.StatusBadRequest, bad.code)
		require.Equal(t, `{"ok":false,"stopReason":"invalid_input","needsHuman":false,"cached":false,"data":{"field":"amount"}}`, bad.body)
		again := c.post("bad-1", `{"amount":0}`)
		require.Equal(t, http.StatusBadRequest, again.code)
		require.Equal(t, strings.Replace(bad.body, `"cached":false`, `"cached":true`, 1), again.body)

		reused := c.post("same-key", `{"different":true}`)
		requireOutsideProblem(t, reused, http.StatusUnprocessableEntity, "idempotency-key-reused")
	})
}

// widgetChecks drives a widget route guarded with an allowlist (id, name,
// tags, details, code, field) and X-Request-Id: 100 concurrent duplicates
// run the handler once and all get the same status, body and headers; what
// the allowlist leaves out, and a blocked key deep inside a kept value, are
// removed and named on the key record; a handler's 400 is replayed as
// written. gin serves the counters and the key record for both apps.
func widgetChecks(t *testing.T, c outsideClient, ginBase, keyPrefix string) {
	ginApp := outsideClient{t: t, base: ginBase}
	runs := func() int {
		n, err := strconv.Atoi(ginApp.get("/runs"))
		require.NoError(t, err)
		return n
	}
	before := runs()
	noKey := c.post("", `{"item":"widget"}`)
	require.Equal(t, http.StatusBadRequest, noKey.code, noKey.body)

	key := keyPrefix + "same-key"
	answers := c.storm(key, `{"item":"widget","tags":["a","b"]}`)
	require.Equal(t, before+1, runs(), "the handler body ran once for 100 concurrent requests")
	id := "w-" + strconv.Itoa(before+1)
	first := onlyFresh(t, answers)
	require.Equal(t, http.StatusCreated, first.code)
	require.Equal(t, `{"details":{"size":{"dims":{"h":{"value":3},"w":2},"unit":"cm"}},"id":"`+id+`","name":"widget","tags":["a","b"]}`,
		first.body, "the route's own JSON, less what the allowlist leaves out and the blocked key deep inside details")
	require.Equal(t, "/widgets/"+id, first.header.Get("Location"))
	require.Equal(t, "req-"+key, first.header.Get("X-Request-Id"))
	for i, a := range answers {
		require.Equal(t, first.code, a.code, "answer %d", i)
		require.Equal(t, first.body, a.body, "answer %d: byte for byte", i)
		for _, h := range []string{"Location", "X-Request-Id", "Content-Type", "Content-Length"} {
			require.Equal(t, first.header.Values(h), a.header.Values(h), "answer %d, header %s", i, h)
		}
	}
	var dropped []string
	require.NoError(t, json.Unmarshal([]byte(ginApp.get("/dropped/"+key+"?scope=POST:widgets")), &dropped))
	require.ElementsMatch(t, []string{"details.size.dims.h.stack", "internalCost"}, dropped, "the key record names what was dropped")

	// A handler's 400 is its answer to those inputs: stored and replayed
	// as written (less the blocked "error"), never turned into a success.
	bad := c.post(keyPrefix+"bad-1", `{"tags":[]}`)
	require.Equal(t, http.StatusBadRequest, bad.code)
	require.Equal(t, `{"code":"item_required","field":"item"}`, bad.body)
	again := c.post(keyPrefix+"bad-1", `{"tags":[]}`)
	require.Equal(t, http.StatusBadRequest, again.code)
	require.Equal(t, bad.body, again.body)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, before+1, runs())

	reused := c.post(key, `{"item":"other"}`)
	requireOutsideProblem(t, reused, http.StatusUnprocessableEntity, "idempotency-key-reused")
}

// outsideClient drives one of the outside program's apps.
type outsideClient struct {
	t          *testing.T
	base, path string
}

type outsideAnswer struct {
	code   int
	body   string
	header http.Header
}

func (c outsideClient) post(key, body string) outsideAnswer {
	req, err := http.NewRequest(http.MethodPost, c.base+c.path, strings.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("X-Tenant", "acme")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Prefer", "wait=30")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return outsideAnswer{resp.StatusCode, string(b), resp.Header}
}

func (c outsideClient) get(path string) string {
	resp, err := http.Get(c.base + path)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return string(b)
}

// storm sends 100 concurrent requests with one key.
func (c outsideClient) storm(key, body string) []outsideAnswer {
	const n = 100
	answers := make([]outsideAnswer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = c.post(key, body) })
	}
	wg.Wait()
	return answers
}

// onlyFresh returns the one answer that is not a replay.
func onlyFresh(t *testing.T, answers []outsideAnswer) outsideAnswer {
	t.Helper()
	var fresh []outsideAnswer
	for _, a := range answers {
		if a.header.Get("Idempotent-Replayed") == "" {
			fresh = append(fresh, a)
		}
	}
	require.Len(t, fresh, 1, "exactly one caller ran the handler; the others got replays")
	return fresh[0]
}

func requireOutsideProblem(t *testing.T, a outsideAnswer, code int, slug string) {
	t.Helper()
	require.Equal(t, code, a.code, a.body)
	require.Equal(t, "application/problem+json", a.header.Get("Content-Type"))
	var p map[string]any
	require.NoError(t, json.Unmarshal([]byte(a.body), &p))
	require.Equal(t, "urn:idemguard:problem:"+slug, p["type"])
}

// TestOutsideModuleRunsTheConformanceSuite: a module that is not idemguard
// runs store/storetest against both stores the module ships (memstore.New,
// and mysql.NewStore on MariaDB) through their public packages only, as a
// store written in another module would.
func TestOutsideModuleRunsTheConformanceSuite(t *testing.T) {
	t.Parallel()
	dir := filepath.Dir(buildOutsideModule(t))
	src, err := os.ReadFile("testdata/outside/conformance_test.go")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "conformance_test.go"), src, 0o600))
	test := exec.Command("go", "test", "-count=1", "-run", "Conformance", ".")
	test.Dir = dir
	test.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOSUMDB=off",
		"OUTSIDE_SERVER_DSN="+testdb.ServerDSN(t))
	out, err := test.CombinedOutput()
	require.NoError(t, err, "go test of the outside module's conformance suite:\n%s", out)
	require.Contains(t, string(out), "ok")
}
