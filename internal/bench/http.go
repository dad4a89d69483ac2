package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/tenancy"
)

// The http suite measures what a client of `idemguard serve` sees: the
// built binary in production mode on the bench database, with an
// openai_chat scope pointed at a fake upstream in this process (loopback),
// against the HTTP floor (httpfloor.go) in a process of its own, with the
// same pool size. Cases, at each concurrency:
//
//   - fresh: floor-fresh (INSERT, upstream call, UPDATE: the same SQL as
//     serve's, audit trail on or off, since a claim's event rides on its row)
//     vs serve-fresh;
//   - replay: floor-replay (one SELECT) vs serve-replay-store (replay cache
//     off) and serve-x3-replay-store (three serve processes, cache off,
//     requests spread round-robin); floor-bare (the bare net/http floor: a
//     fixed body, no router, no auth, no SQL) vs serve-replay-cached (cache
//     on: the replay never leaves the process); serve-mcp-replay-store
//     (the MCP door's tool call, http_mcp.go) vs serve-replay-store;
//   - storm / storm-x3: 1,000 requests with one new key (the upstream takes
//     stormDelay) on one or three serve processes; the row's note gives the
//     executions (must be 1), the statuses and the p99.
//
// cpu/op is the server processes' CPU (utime+stime from /proc/<pid>/stat)
// per request, not the client's. The client targets 127.0.0.1 only.

func init() {
	register(suite{name: "http", about: "HTTP: the built serve binary (production, MariaDB) vs a minimal gin+SQL floor; storms of one key", run: runHTTP})
}

// doorPath is the OpenAI door's route on every serve process (serveConfig).
const doorPath = "/openai/v1/chat/completions"

// HTTP suite settings.
const (
	httpTenant = tenancy.ID("bench-http")
	httpScope  = "bench.chat"
	// stormRequests is the size of one same-key storm.
	stormRequests = 1000
	// stormDelay is the upstream's latency for the storm key, so that
	// duplicates arrive while the one execution runs.
	stormDelay = 50 * time.Millisecond
	// The HTTP targets: the least serve/floor throughput ratios at
	// concurrency 16, for fresh keys (against the floor running the same
	// SQL: the claim with its audit event), store-only replays (against one
	// SELECT) and cached replays (against the bare net/http floor).
	httpFreshTarget  = 0.9
	httpReplayTarget = 0.85
	httpCachedTarget = 0.8
	// httpDoorTarget is the least throughput ratio of the OpenAI door to
	// POST /v1/ops/{scope} on the same process, fresh and replayed.
	httpDoorTarget = 0.95
	// serveStartTimeout bounds building and starting the server processes.
	serveStartTimeout = 2 * time.Minute
)

func runHTTP(ctx context.Context, e *env) (rows []row, err error) {
	h, err := startHTTPBench(ctx, e)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, h.close()) }()

	if err := h.populate(ctx); err != nil {
		return nil, err
	}
	cached, store := h.serves[0], h.serves[1]
	stores := h.serves[1:]

	var seq atomic.Int64
	fresh := func(name, baseline string, target float64, path string, s *proc) benchCase {
		return benchCase{name: name, baseline: baseline, targetRatio: target, cpu: cpuOf(s), op: func(ctx context.Context) error {
			n := seq.Add(1)
			return h.expect(ctx, s.url+path, "fresh-"+strconv.FormatInt(n, 10), "fresh "+strconv.FormatInt(n, 10), false)
		}}
	}
	floorFresh := fresh("floor-fresh", "", 0, "/v1/ops/"+httpScope, h.floor)
	serveFresh := fresh("serve-fresh", floorFresh.name, httpFreshTarget, "/v1/ops/"+httpScope, store)
	doorFresh := fresh("door-fresh", serveFresh.name, httpDoorTarget, doorPath, store)

	replay := func(name, baseline string, target float64, path string, ps ...*proc) benchCase {
		var seq atomic.Int64
		return benchCase{name: name, baseline: baseline, targetRatio: target, cpu: cpuOf(ps...), op: func(ctx context.Context) error {
			n := seq.Add(1)
			k := n % replayKeys
			s := ps[int(n)%len(ps)]
			return h.expect(ctx, s.url+path, "replay-"+strconv.FormatInt(k, 10), "replay "+strconv.FormatInt(k, 10), true)
		}}
	}
	floorReplay := replay("floor-replay", "", 0, "/floor/replay/"+httpScope, h.floor)
	floorBare := replay("floor-bare", "", 0, bareFloorPath, h.floor)
	serveStore := replay("serve-replay-store", floorReplay.name, httpReplayTarget, "/v1/ops/"+httpScope, store)
	serveCached := replay("serve-replay-cached", floorBare.name, httpCachedTarget, "/v1/ops/"+httpScope, cached)
	serveX3 := replay("serve-x3-replay-store", floorReplay.name, 0, "/v1/ops/"+httpScope, stores...)
	serveMCP := h.mcpReplay("serve-mcp-replay-store", serveStore.name, store) // http_mcp.go
	doorStore := replay("door-replay-store", serveStore.name, httpDoorTarget, doorPath, store)
	doorCached := replay("door-replay-cached", serveCached.name, httpDoorTarget, doorPath, cached)

	groups := map[string]bool{}
	for g := range strings.SplitSeq(e.opts.httpCases, ",") {
		groups[strings.TrimSpace(g)] = true
	}
	for _, c := range e.opts.concurrency {
		if groups["fresh"] {
			r, err := e.compare(ctx, "http", c, floorFresh, serveFresh, doorFresh)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r...)
		}
		if groups["replay"] {
			r, err := e.compare(ctx, "http", c, floorReplay, floorBare, serveStore, serveCached, serveX3, serveMCP, doorStore, doorCached)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r...)
		}
		if !groups["storm"] {
			continue
		}
		for _, st := range []struct {
			name string
			ps   []*proc
		}{{"storm", []*proc{cached}}, {"storm-x3", stores}} {
			sr, err := h.storm(ctx, st.name, c, st.ps)
			if err != nil {
				return nil, err
			}
			rows = append(rows, sr)
		}
	}
	return rows, nil
}

// httpBench is the running HTTP suite: the fake upstream, the serve
// processes (0: replay cache on; 1-3: cache off) and the floor.
type httpBench struct {
	e        *env
	dir      string
	upstream *fakeUpstream
	serves   []*proc
	floor    *proc
	client   *http.Client
	apiKey   string
}

// proc is one server process.
type proc struct {
	name string
	cmd  *exec.Cmd
	url  string // http://127.0.0.1:port
	done chan error
}

func startHTTPBench(ctx context.Context, e *env) (_ *httpBench, err error) {
	dir, err := os.MkdirTemp("", "idemguard-bench-http-")
	if err != nil {
		return nil, err
	}
	h := &httpBench{e: e, dir: dir, apiKey: "bench-key-" + randomHex(16),
		client: &http.Client{Transport: loopbackTransport(), Timeout: time.Minute}}
	defer func() {
		if err != nil {
			err = errors.Join(err, h.close())
		}
	}()
	h.upstream = newFakeUpstream()

	ctx, cancel := context.WithTimeout(ctx, serveStartTimeout)
	defer cancel()
	bin, err := buildServe(ctx, e, dir)
	if err != nil {
		return nil, err
	}

	digest := auth.HashAPIKey(h.apiKey)
	for i := range 4 {
		cacheSize := -1
		if i == 0 {
			cacheSize = 0 // the default
		}
		cfgPath := filepath.Join(dir, fmt.Sprintf("serve%d.yaml", i))
		if err := os.WriteFile(cfgPath, serveConfig(e.opts.pool, cacheSize, h.upstream.url()), 0o600); err != nil {
			return nil, err
		}
		p, err := startProc(ctx, e.log, dir, fmt.Sprintf("serve%d", i), serveCmd(e, bin, cfgPath, digest))
		if err != nil {
			return nil, err
		}
		h.serves = append(h.serves, p)
	}
	cmd, err := floorCmd(e, h.upstream.url(), digest)
	if err != nil {
		return nil, err
	}
	if h.floor, err = startProc(ctx, e.log, dir, "floor", cmd); err != nil {
		return nil, err
	}
	for _, p := range append(slices.Clone(h.serves), h.floor) {
		if err := h.waitReady(ctx, p); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// buildServe builds ./cmd/idemguard into dir and returns the binary's path.
func buildServe(ctx context.Context, e *env, dir string) (string, error) {
	bin := filepath.Join(dir, "idemguard")
	e.log.Info("bench: building serve", slog.String("binary", bin))
	build := exec.CommandContext(ctx, "go", e.serveBuildArgs(bin)...)
	var err error
	if build.Dir, err = moduleRoot(ctx); err != nil {
		return "", err
	}
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/idemguard: %w\n%s", err, out)
	}
	return bin, nil
}

// serveCmd runs the serve binary bin with the config at cfgPath on the bench
// database, accepting the API key whose digest is given for httpTenant.
func serveCmd(e *env, bin, cfgPath, digest string) *exec.Cmd {
	cmd := exec.Command(bin, "serve", "--config", cfgPath)
	cmd.Env = append(os.Environ(),
		"IDEMGUARD_MYSQL_DSN="+e.dsn,
		"IDEMPOTENCY_SECRET="+hexOf(e.secret),
		"IDEMGUARD_API_KEYS="+string(httpTenant)+":"+digest,
		"IDEMGUARD_OPENAI_API_KEY=bench-upstream-key",
	)
	cmd.Env = append(cmd.Env, e.serveProfileEnv()...)
	return cmd
}

// floorCmd runs this program as the HTTP floor (runHTTPFloor) against the
// upstream at upstreamURL, with the same pool and API key as serve.
func floorCmd(e *env, upstreamURL, digest string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(),
		envFloor+"=1",
		envFloorDSN+"="+e.dsn,
		envFloorPool+"="+strconv.Itoa(e.opts.pool),
		envFloorUpstream+"="+upstreamURL+"/chat/completions",
		envFloorKeys+"="+string(httpTenant)+":"+digest,
	)
	cmd.Env = append(cmd.Env, e.pprofEnv()...)
	return cmd, nil
}

// serveConfig is the YAML config of one serve process.
func serveConfig(pool, replayCacheSize int, upstream string) []byte {
	var b strings.Builder
	// No operator listener: its fixed default address would be taken by
	// the first of several processes, and the bench reads no metrics.
	b.WriteString("mode: production\nlisten: 127.0.0.1:0\nmetrics_listen: off\n")
	// The fake upstream is http:// on loopback; the storms are one tenant's.
	b.WriteString("allow_insecure_upstreams: true\nlimits: {concurrent: -1, jobs: -1, rate: -1}\n")
	fmt.Fprintf(&b, "pool:\n  max_open_conns: %d\n", pool)
	if replayCacheSize != 0 {
		fmt.Fprintf(&b, "replay_cache_size: %d\n", replayCacheSize)
	}
	fmt.Fprintf(&b, "openai:\n  base_url: %s\n  model: bench-model\n  timeout: 30s\n", upstream)
	fmt.Fprintf(&b, "mcp: {path: %s}\n", mcpPath)
	fmt.Fprintf(&b, "scopes:\n  - name: %s\n    operation: openai_chat\n", httpScope)
	fmt.Fprintf(&b, "doors:\n  - {wire: openai, prefix: /openai/v1, scope: %s}\n", httpScope)
	return []byte(b.String())
}

func hexOf(b []byte) string { return fmt.Sprintf("%x", b) }

// moduleRoot is the directory of the go.mod of the module being benchmarked.
func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run the bench from inside the idemguard module (go env GOMOD is empty)")
	}
	return filepath.Dir(mod), nil
}

// startProc starts cmd with its stderr going to a file in dir (the request
// log is part of what serve costs; reading it through a pipe would cost this
// process CPU on the same cores) and waits for its "serve: listening" line.
func startProc(ctx context.Context, log *slog.Logger, dir, name string, cmd *exec.Cmd) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child has its own descriptor
	cmd.Stdout, cmd.Stderr = io.Discard, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	for {
		if a, ok := listeningAddr(logPath); ok {
			host, _, err := net.SplitHostPort(a)
			if err != nil || host != "127.0.0.1" {
				_ = p.stop()
				return nil, fmt.Errorf("%s listens on %q, want 127.0.0.1", name, a)
			}
			p.url = "http://" + a
			log.Info("bench: started", slog.String("process", name), slog.Int("pid", cmd.Process.Pid), slog.String("url", p.url))
			return p, nil
		}
		select {
		case err := <-p.done:
			p.done <- err
			return nil, fmt.Errorf("%s exited before listening (%v):\n%s", name, err, head(logPath))
		case <-ctx.Done():
			_ = p.stop()
			return nil, fmt.Errorf("%s did not start: %w\n%s", name, ctx.Err(), head(logPath))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// listeningAddr finds the address in the "serve: listening" line of the log.
func listeningAddr(path string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l struct{ Msg, Addr string }
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == listeningMsg && l.Addr != "" {
			return l.Addr, true
		}
	}
	return "", false
}

// head is the start of a log file, for an error message.
func head(path string) string {
	b, _ := os.ReadFile(path)
	return string(b[:min(len(b), 4096)])
}

// stop ends the process (SIGTERM, then SIGKILL after 10s) and returns its
// exit error, if any besides the signal.
func (p *proc) stop() error {
	if p == nil || p.cmd.Process == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) && !ee.Success() && ee.ExitCode() != -1 {
			return fmt.Errorf("%s exited with %w", p.name, err)
		}
		return nil
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("%s did not stop within 10s of SIGTERM; killed", p.name)
	}
}

func (h *httpBench) close() error {
	var errs []error
	for _, p := range append(slices.Clone(h.serves), h.floor) {
		if err := p.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if h.upstream != nil {
		h.upstream.close()
	}
	h.client.CloseIdleConnections()
	errs = append(errs, os.RemoveAll(h.dir))
	return errors.Join(errs...)
}

// waitReady polls /healthz (serve; the floor answers 404 there, which is
// fine: it answers) until the process answers or ctx ends.
func (h *httpBench) waitReady(ctx context.Context, p *proc) error {
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/healthz", nil)
		resp, err := h.client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not answer: %w", p.name, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// chatBody is an openai_chat request whose one message is content (ASCII);
// to the OpenAI door (url ends with doorPath) with a model, as an SDK sends
// it. The model is no part of the key: both are one key's request.
func chatBody(url, content string) []byte {
	if strings.HasSuffix(url, doorPath) {
		return []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + content + `"}]}`)
	}
	return []byte(`{"messages":[{"role":"user","content":"` + content + `"}]}`)
}

// post sends one operation request and returns its status and whether it
// was a replay (Idempotent-Replayed: true).
func (h *httpBench) post(ctx context.Context, url, key, content string) (int, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(chatBody(url, content)))
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Authorization", "Bearer "+h.apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, false, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", err
}

// expect posts and checks the answer: 200, and a replay iff replayed (the
// floor sends no replay header, so only 200 is checked there).
func (h *httpBench) expect(ctx context.Context, url, key, content string, replayed bool) error {
	code, rep, err := h.post(ctx, url, key, content)
	switch {
	case err != nil:
		return err
	case code != http.StatusOK:
		return fmt.Errorf("POST %s key %s: status %d, want 200", url, key, code)
	case strings.HasPrefix(url, h.floor.url):
		return nil
	case rep != replayed:
		return fmt.Errorf("POST %s key %s: replayed %t, want %t", url, key, rep, replayed)
	}
	return nil
}

// populate makes the replay keys succeed on serve (rows shared by every
// serve process) and on the floor (rows of its own naming).
func (h *httpBench) populate(ctx context.Context) error {
	return forEachKey(ctx, replayKeys, func(n int64) error {
		k, c := "replay-"+strconv.FormatInt(n, 10), "replay "+strconv.FormatInt(n, 10)
		err := h.expect(ctx, h.serves[1].url+"/v1/ops/"+httpScope, k, c, false)
		if err == nil {
			err = h.expect(ctx, h.floor.url+"/v1/ops/"+httpScope, k, c, false)
		}
		if err != nil {
			return fmt.Errorf("populate: %w", err)
		}
		return nil
	})
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// storm sends stormRequests requests with one new key from concurrency
// workers, spread round-robin over ps, and returns its row. Any answer but
// 200 or 409, or more than one execution, fails the run.
func (h *httpBench) storm(ctx context.Context, name string, concurrency int, ps []*proc) (row, error) {
	key := "storm-" + randomHex(8)
	content := stormPrefix + key
	var (
		next     atomic.Int64
		mu       sync.Mutex
		statuses = map[int]int{}
		lat      []time.Duration
		first    error
		wg       sync.WaitGroup
	)
	cpu := cpuOf(ps...)
	cpu0, start := cpu(), time.Now()
	for range concurrency {
		wg.Go(func() {
			for {
				n := next.Add(1) - 1
				if n >= stormRequests || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				code, _, err := h.post(ctx, ps[int(n)%len(ps)].url+"/v1/ops/"+httpScope, key, content)
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					first = cmpErr(first, err)
				} else {
					statuses[code]++
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed, used := time.Since(start), cpu()-cpu0
	if first != nil {
		return row{}, fmt.Errorf("%s at concurrency %d: %w", name, concurrency, first)
	}
	execs := h.upstream.executions(content)
	var parts []string
	for _, code := range slices.Sorted(maps.Keys(statuses)) {
		parts = append(parts, fmt.Sprintf("%d×%d", statuses[code], code))
		if code != http.StatusOK && code != http.StatusConflict {
			return row{}, fmt.Errorf("%s at concurrency %d: %d answers with status %d", name, concurrency, statuses[code], code)
		}
	}
	if execs != 1 {
		return row{}, fmt.Errorf("%s at concurrency %d: %d executions of one key, want 1", name, concurrency, execs)
	}
	r := summarize("http", benchCase{name: name}, concurrency, []round{{ops: len(lat), elapsed: elapsed, cpu: used, latencies: lat}})
	r.Note = fmt.Sprintf("%d requests, one key, %d process(es): executions %d; statuses %s; p99 %s",
		len(lat), len(ps), execs, strings.Join(parts, " "), formatLatency(r.P99))
	return r, nil
}

// stormPrefix starts the message of a storm request; the fake upstream
// counts those calls by message and answers them after stormDelay.
const stormPrefix = "storm "

// fakeUpstream is an OpenAI-compatible chat completions endpoint on
// loopback: it answers at once (stormDelay for storm messages) and counts
// the calls per storm message.
type fakeUpstream struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[string]int
}

func newFakeUpstream() *fakeUpstream {
	u := &fakeUpstream{calls: map[string]int{}}
	answer := []byte(`{"id":"chatcmpl-bench","object":"chat.completion","model":"bench-model",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"Retries, once: the guard remembers."},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20}}`)
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || len(in.Messages) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if c := in.Messages[0].Content; strings.HasPrefix(c, stormPrefix) {
			u.mu.Lock()
			u.calls[c]++
			u.mu.Unlock()
			time.Sleep(stormDelay)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	return u
}

func (u *fakeUpstream) url() string { return u.srv.URL }
func (u *fakeUpstream) close()      { u.srv.Close() }

func (u *fakeUpstream) executions(content string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[content]
}

// loopbackTransport is an HTTP transport that dials 127.0.0.1 only.
func loopbackTransport() *http.Transport {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil || host != "127.0.0.1" {
				return nil, fmt.Errorf("bench: refusing to dial %q: the HTTP bench targets 127.0.0.1 only", addr)
			}
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
}

// cpuOf is the summed CPU time of the processes (0 where unreadable).
func cpuOf(ps ...*proc) func() time.Duration {
	return func() time.Duration {
		var sum time.Duration
		for _, p := range ps {
			if p.cmd != nil && p.cmd.Process != nil {
				sum += procCPU(p.cmd.Process.Pid)
			}
		}
		return sum
	}
}

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux configuration Go supports).
const clockTick = 10 * time.Millisecond

// procCPU is the user+system CPU time of process pid, from
// /proc/<pid>/stat; 0 when it cannot be read (not Linux).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; the fields after it start
	// at field 3 (state). utime and stime are fields 14 and 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * clockTick
}
