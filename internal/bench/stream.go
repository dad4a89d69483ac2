package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/store"
)

// The stream suite measures streamed calls ("stream": true) through the
// built serve binary against a floor that relays the same upstream stream
// without a guard (the floor process's POST /floor/stream/:scope: no claim,
// no events built, the upstream's bytes copied and flushed per event).
// Every request is a fresh key, so serve claims, relays, stores the event
// sequence and commits each one. Three ways of reading a stream from serve
// are measured against the floor: the owner (the request that runs it), a
// follower in the owner's process (a second request for the key with
// Prefer: wait, once the owner has its first event: it follows the live
// log), and a resumed stream (the owner hangs up after resumeAfter events
// and the same request is sent again with Last-Event-ID). Reported for each:
// events/s and time to first event (p50), with their ratios to the floor's
// (the ratio column is throughput over the floor's), and serve's resident
// memory with streamLive streams open at once.

func init() {
	register(suite{name: "stream", about: "HTTP streams: time to first event and events/s through serve vs a guard-less relay; RSS with 200 live streams", run: runStream})
}

const (
	streamScope = "bench.stream"
	// streamChunks is the upstream's content chunks per answer; with its
	// finish and usage chunks an answer has streamChunks+2 events.
	streamChunks = 20
	// streamGap is the upstream's pause between chunks.
	streamGap = time.Millisecond
	// streamLive is how many streams are held open at once for the RSS figure.
	streamLive = 200
	// slowPrefix marks a request whose upstream pauses slowGap between
	// chunks, so that streamLive streams are open at the same time.
	slowPrefix = "slow "
	slowGap    = 100 * time.Millisecond
	// resumeAfter is the events a resumed stream's first request reads.
	resumeAfter = 5
)

func runStream(ctx context.Context, e *env) (rows []row, err error) {
	sb, err := startStreamBench(ctx, e)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, sb.close()) }()

	sc := newStreamCases(sb)
	cases := sc.cases()
	for _, c := range e.opts.concurrency {
		sc.reset()
		r, err := e.compare(ctx, "stream", c, cases...)
		if err != nil {
			return nil, err
		}
		r = sc.notes(r)
		for i := range r {
			if r[i].Case != caseOwner {
				continue
			}
			// The owner's first event waits for its claim: within the
			// floor's plus one claim round trip is the budget.
			owner := sc.ttfe[caseOwner].median()
			if claim, err := claimRoundTrip(ctx, e, c); err == nil {
				r[i].Note += firstEventBudget(owner, sc.ttfe[caseFloor].median(), claim)
			}
			r[i].Note += claimedBudget(owner, sc.ttfe[caseClaimed].median())
			if paced, err := claimAtPace(ctx, e, c, r[i].P50); err == nil {
				r[i].Note += fmt.Sprintf("; a claim at the streams' pace p50 %s", paced.Round(time.Microsecond))
			}
			if e.streamPhases && c == 1 {
				note, err := sb.phases(ctx, cases)
				if err != nil {
					return nil, err
				}
				r[i].Note += note
			}
		}
		rows = append(rows, r...)
	}
	for _, p := range []struct {
		name, path string
		proc       *proc
	}{{"floor-rss", "/floor/stream/" + streamScope, sb.floor}, {"serve-rss", "/v1/ops/" + streamScope, sb.serve}} {
		r, err := sb.rss(ctx, p.name, p.proc, p.path)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// phases traces serve-stream and floor-stream-claimed, unmeasured, and
// notes where each one's first event waits, by the goroutine serving it
// (phases.go).
func (sb *streamBench) phases(ctx context.Context, cases []benchCase) (string, error) {
	op := func(name string) func(context.Context) error {
		i := slices.IndexFunc(cases, func(c benchCase) bool { return c.name == name })
		return cases[i].op
	}
	serveAddr, err := pprofAddr(sb.e.pprofDir, sb.serve, false)
	if err != nil {
		return "", err
	}
	floorAddr, err := pprofAddr(sb.e.pprofDir, sb.floor, true)
	if err != nil {
		return "", err
	}
	sv, err := sb.e.tracePhases(ctx, serveAddr, "routers.(*handlers).runStream", op(caseOwner))
	if err != nil {
		return "", fmt.Errorf("-stream-phases: %s: %w", caseOwner, err)
	}
	cl, err := sb.e.tracePhases(ctx, floorAddr, "(*floor).claimedStream", op(caseClaimed))
	if err != nil {
		return "", fmt.Errorf("-stream-phases: %s: %w", caseClaimed, err)
	}
	return fmt.Sprintf("; by the goroutine serving it (-stream-phases): %s; %s by its goroutine: %s", sv, caseClaimed, cl), nil
}

// claimRoundTrip is the p50 latency of one claim round trip on the bench
// database at concurrency c: the claim INSERT of a fresh key, autocommit,
// the least a claim can be.
func claimRoundTrip(ctx context.Context, e *env, c int) (time.Duration, error) {
	r, err := e.runFor(ctx, c, claimProbeTime, func(ctx context.Context) error {
		_, err := e.db.ExecContext(ctx, rawClaimSQL, string(tenantRaw), streamScope, randomHex(32), randomHex(32),
			randomHex(16), benchTTL.Microseconds())
		return err
	}, nil)
	if err != nil {
		return 0, err
	}
	lat := &durations{d: r.latencies}
	return lat.median(), nil
}

// claimProbeTime is how long claimRoundTrip measures.
const claimProbeTime = 500 * time.Millisecond

// claimAtPace is the p50 latency of the same claim INSERT sent as serve's
// owner sends it: each of c workers claims, pauses for one stream (pace),
// then completes the row with the nonce-guarded UPDATE, and claims again.
// It is not the budget (claimRoundTrip is): it says what one claim round
// trip costs after the connection, and the server's thread behind it, sat
// idle for a stream, where the probe's claims follow one another (at high
// concurrency those queue on each other's log flushes, and a paced claim
// can come out cheaper).
func claimAtPace(ctx context.Context, e *env, c int, pace time.Duration) (time.Duration, error) {
	var lat durations
	_, err := e.runFor(ctx, c, pacedProbeTime, func(ctx context.Context) error {
		nonce := randomHex(16)
		sent := time.Now()
		res, err := e.db.ExecContext(ctx, rawClaimSQL, string(tenantRaw), streamScope, randomHex(32), randomHex(32),
			nonce, benchTTL.Microseconds())
		if err != nil {
			return err
		}
		lat.add(time.Since(sent))
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		select {
		case <-time.After(pace):
		case <-ctx.Done():
			return nil
		}
		_, err = e.db.ExecContext(ctx, rawCompleteSQL, string(store.RowSucceeded), `{}`, 200, benchTTL.Microseconds(), id, nonce)
		return err
	}, nil)
	return lat.median(), err
}

// pacedProbeTime is how long claimAtPace measures: a few dozen claims per
// worker at a stream's pace.
const pacedProbeTime = time.Second

// firstEventBudget is the note that says whether serve's time to first
// event sv is within the floor's fl plus one claim round trip.
func firstEventBudget(sv, fl, claim time.Duration) string {
	verdict := "within"
	if sv > fl+claim {
		verdict = "over"
	}
	return fmt.Sprintf("; floor + one claim round trip (%s) = %s: %s", claim.Round(time.Microsecond),
		(fl + claim).Round(time.Microsecond), verdict)
}

// claimedBudget is the note that compares serve's time to first event sv
// with the claimed relay's cl: the relay plus one claim round trip,
// measured where a stream pays the claim (floor-stream-claimed).
func claimedBudget(sv, cl time.Duration) string {
	verdict := "within"
	if sv > cl {
		verdict = "over"
	}
	return fmt.Sprintf("; the relay with its claim (%s) p50 %s: %s", caseClaimed, cl.Round(time.Microsecond), verdict)
}

// durations collects latencies from concurrent workers.
type durations struct {
	mu sync.Mutex
	d  []time.Duration
}

func (d *durations) add(v time.Duration) { d.mu.Lock(); d.d = append(d.d, v); d.mu.Unlock() }
func (d *durations) reset()              { d.mu.Lock(); d.d = nil; d.mu.Unlock() }

func (d *durations) median() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.d) == 0 {
		return 0
	}
	s := slices.Clone(d.d)
	slices.Sort(s)
	return s[len(s)/2]
}

// streamBench is the running stream suite.
type streamBench struct {
	e        *env
	dir      string
	upstream *httptest.Server
	serve    *proc
	floor    *proc
	client   *http.Client
	apiKey   string
}

func startStreamBench(ctx context.Context, e *env) (_ *streamBench, err error) {
	dir, err := os.MkdirTemp("", "idemguard-bench-stream-")
	if err != nil {
		return nil, err
	}
	sb := &streamBench{e: e, dir: dir, apiKey: "bench-key-" + randomHex(16),
		client: &http.Client{Transport: loopbackTransport(), Timeout: time.Minute}}
	defer func() {
		if err != nil {
			err = errors.Join(err, sb.close())
		}
	}()
	sb.upstream = httptest.NewServer(http.HandlerFunc(streamUpstream))

	ctx, cancel := context.WithTimeout(ctx, serveStartTimeout)
	defer cancel()
	bin, err := buildServe(ctx, e, dir)
	if err != nil {
		return nil, err
	}
	digest := auth.HashAPIKey(sb.apiKey)
	cfg := strings.Replace(string(serveConfig(e.opts.pool, -1, sb.upstream.URL)), httpScope, streamScope, -1)
	cfgPath := filepath.Join(dir, "serve.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	if sb.serve, err = startProc(ctx, e.log, dir, "serve-stream", serveCmd(e, bin, cfgPath, digest)); err != nil {
		return nil, err
	}
	cmd, err := floorCmd(e, sb.upstream.URL, digest)
	if err != nil {
		return nil, err
	}
	if sb.floor, err = startProc(ctx, e.log, dir, "floor-stream", cmd); err != nil {
		return nil, err
	}
	return sb, nil
}

func (sb *streamBench) close() error {
	var err error
	for _, p := range []*proc{sb.serve, sb.floor} {
		if p != nil {
			err = errors.Join(err, p.stop())
		}
	}
	if sb.upstream != nil {
		sb.upstream.Close()
	}
	return errors.Join(err, os.RemoveAll(sb.dir))
}

// streamUpstream streams streamChunks content chunks, a finish chunk, a
// usage chunk and [DONE], with the provider's fields serve must drop.
func streamUpstream(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	gap := streamGap
	if bytes.Contains(body, []byte(slowPrefix)) {
		gap = slowGap
	}
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	for i := range streamChunks {
		if i > 0 {
			select {
			case <-time.After(gap):
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"model\":\"bench-model\",\"system_fingerprint\":\"fp_b\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"token%d \"},\"finish_reason\":null}]}\n\n", i)
		_ = rc.Flush()
	}
	fmt.Fprint(w, "data: {\"id\":\"chatcmpl-bench\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
	fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-bench\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", streamChunks, streamChunks+12)
	fmt.Fprint(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

// streamUntil POSTs one streamed request and reads it to [DONE]: the time
// to its first event and the events before [DONE]; firstEvent, when set, is
// called at the first event.
func (sb *streamBench) streamUntil(ctx context.Context, url, key, content string, firstEvent func()) (time.Duration, int, error) {
	got, err := sb.do(ctx, streamReq{url: url, key: key, content: content, firstEvent: firstEvent})
	return got.first, got.events, err
}

// streamReq is one streamed request of the suite.
type streamReq struct {
	url, key, content string
	lastEventID       string // resume after this event
	wait              bool   // Prefer: wait (a follower of a running stream)
	firstEvent        func() // called at the first event
	cutAfter          int    // > 0: hang up after that many events
}

// streamGot is what a streamed request read.
type streamGot struct {
	first  time.Duration // time to the first event
	events int           // events before [DONE] (or the cut)
	lastID string        // the id of the last event read
}

// do sends r and reads its answer to [DONE], or to r.cutAfter events.
func (sb *streamBench) do(ctx context.Context, r streamReq) (streamGot, error) {
	body := `{"messages":[{"role":"user","content":"` + r.content + `"}],"stream":true}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, strings.NewReader(body))
	if err != nil {
		return streamGot{}, err
	}
	req.Header.Set("Authorization", "Bearer "+sb.apiKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", r.key)
	if r.lastEventID != "" {
		req.Header.Set("Last-Event-ID", r.lastEventID)
	}
	if r.wait {
		req.Header.Set("Prefer", "wait=30")
	}
	start := time.Now()
	resp, err := sb.client.Do(req)
	if err != nil {
		return streamGot{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return streamGot{}, fmt.Errorf("%s: status %d: %s", r.url, resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body)
	var got streamGot
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return streamGot{}, fmt.Errorf("%s: the stream ended before [DONE] after %d events: %w", r.url, got.events, err)
		}
		line = strings.TrimSuffix(line, "\n")
		if id, ok := strings.CutPrefix(line, "id: "); ok {
			got.lastID = id
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return got, nil
		}
		if got.events == 0 {
			got.first = time.Since(start)
			if r.firstEvent != nil {
				r.firstEvent()
			}
		}
		if got.events++; got.events == r.cutAfter {
			return got, nil // the deferred Close hangs up
		}
	}
}

// rss opens streamLive slow streams on p at once and reports p's resident
// memory once every one has its first event, against p's memory before.
func (sb *streamBench) rss(ctx context.Context, name string, p *proc, path string) (row, error) {
	pid := p.cmd.Process.Pid
	before := procRSS(pid)
	var wg sync.WaitGroup
	var started sync.WaitGroup
	started.Add(streamLive)
	errs := make(chan error, streamLive)
	base := randomHex(6)
	for i := range streamLive {
		wg.Go(func() {
			once := sync.OnceFunc(started.Done)
			defer once()
			key := fmt.Sprintf("rss-%s-%s-%d", name, base, i)
			if _, _, err := sb.streamUntil(ctx, p.url+path, key, slowPrefix+key, once); err != nil {
				errs <- err
			}
		})
	}
	started.Wait()
	during := procRSS(pid)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return row{}, fmt.Errorf("stream/%s: %w", name, err)
	}
	per := (during - before) / streamLive
	return row{Suite: "stream", Case: name, Concurrency: streamLive,
		Note: fmt.Sprintf("RSS %d MiB idle, %d MiB with %d live streams (%d KiB per stream)",
			before>>20, during>>20, streamLive, per>>10)}, nil
}

// procRSS is the resident set of process pid in bytes (VmRSS of
// /proc/<pid>/status); 0 when it cannot be read (not Linux).
func procRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// relayStream is the floor's streamed route: it forwards the body to the
// upstream and copies its answer to the client, flushing after each event,
// with no claim, no sanitizing and nothing stored. The last event, [DONE],
// is not flushed on its own: the handler's return flushes it together with
// the end of the chunked body, as serve ends a stream (pipeline.SSE.End).
// Flushed alone, the body's end came in a later write, the client (which
// stops reading at [DONE]) closed a body it had not read to its end, and
// lost its connection: about half the floor's requests dialed again, which
// put a TCP handshake into the floor's time to first event and not into
// serve's.
func (f *floor) relayStream(c *gin.Context) {
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		c.Status(http.StatusBadRequest)
		return
	}
	f.relay(c, body)
}

// claimedStream is relayStream after a claim: the claim INSERT of the
// fresh floor (POST /v1/ops/:scope) before the upstream is called, and its
// nonce-guarded UPDATE once the stream is relayed. It is the guard-less
// relay plus one claim round trip, measured where a guarded stream pays
// it: after the claim, the upstream (and the client) answer a process
// that has waited for the database.
func (f *floor) claimedStream(c *gin.Context) {
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		c.Status(http.StatusBadRequest)
		return
	}
	id, nonce, ok := f.claim(c, body, func(string, string, string) { c.Status(http.StatusConflict) })
	if !ok || !f.relay(c, body) {
		return
	}
	// As serve commits a stream: before the body's end, which carries the
	// last event.
	_, _ = f.db.ExecContext(context.WithoutCancel(c.Request.Context()), rawCompleteSQL, string(store.RowSucceeded), streamEnvelope, 200,
		benchTTL.Microseconds(), id, nonce)
}

// streamEnvelope is what claimedStream stores for a relayed stream.
const streamEnvelope = `{"ok":true,"stopReason":"completed","needsHuman":false,"cached":false,"data":{}}`

// relay forwards body to the upstream and copies its answer to the
// client; false when the upstream could not be called or the answer did
// not reach [DONE].
func (f *floor) relay(c *gin.Context, body []byte) bool {
	req, err := http.NewRequestWithContext(c.Request.Context(), http.MethodPost, f.upstream, bytes.NewReader(body))
	if err != nil {
		c.Status(http.StatusBadGateway)
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		c.Status(http.StatusBadGateway)
		return false
	}
	defer resp.Body.Close()
	w := c.Writer
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	br := bufio.NewReader(resp.Body)
	done := false // the event being copied is the last, [DONE]
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if _, werr := w.Write(line); werr != nil {
				return false
			}
			switch {
			case string(line) == "data: [DONE]\n":
				done = true
			case len(line) == 1 && !done: // the blank line that ends an event
				w.Flush()
			}
		}
		if err != nil {
			return done // the handler's end flushes what is left with the body's end
		}
	}
}
