package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/trace"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestClassifyNamesAWaitByTheStackItBlockedIn(t *testing.T) {
	serve := []string{"net/http.serverHandler.ServeHTTP", "net/http.(*conn).serve"}
	in := func(frames ...string) []string { return append(frames, serve...) }
	for _, c := range []struct {
		frames []string
		want   waitKind
	}{
		{[]string{"internal/poll.(*FD).Read", "net/http.(*connReader).Read", "bufio.(*Reader).fill", "bufio.(*Reader).Peek",
			"net/http.(*conn).serve"}, waitRequest},
		{[]string{"internal/poll.(*FD).Read", "net/http.(*conn).readRequest", "net/http.(*conn).serve"}, waitRequest},
		{in("internal/poll.(*FD).Read", "github.com/go-sql-driver/mysql.(*mysqlConn).readPacket", "main.(*floor).claim"), waitDatabase},
		{in("runtime.selectgo", "net/http.(*persistConn).roundTrip", "net/http.(*Client).Do"), waitUpstream},
		{in("internal/poll.(*FD).Read", "net/http.(*body).Read", "net/http.(*bodyEOFSignal).Read", "bufio.(*Scanner).Scan"), waitBody},
		// A handler's own wait runs inside conn.serve too: not the next request,
		// and reading its request's body is not the upstream's.
		{in("sync.(*Mutex).Lock", "main.handler"), waitOther},
		{in("internal/poll.(*FD).Read", "net/http.(*connReader).Read", "net/http.(*body).Read", "io.ReadAll", "main.handler"), waitOther},
		{in("bufio.(*Reader).Peek", "main.handler"), waitOther},
	} {
		require.Equal(t, c.want, classify(c.frames), "%q", c.frames)
	}
}

func TestRequestStepsFollowARequestToItsFirstBodyWait(t *testing.T) {
	us := time.Microsecond
	tr := func(at int, s goState, w waitKind) goTransition {
		return goTransition{at: time.Duration(at) * us, state: s, wait: w}
	}
	ts := []goTransition{
		tr(0, goRunning, ""),
		tr(5, goWaiting, waitRequest),
		// A request: readied at 100, running at 103, ...
		tr(100, goRunnable, ""), tr(103, goRunning, ""),
		tr(150, goWaiting, waitDatabase), // running 47, runnable 3
		tr(450, goRunning, ""),           // the claim: 300
		tr(480, goWaiting, waitUpstream), // running 30
		tr(600, goRunnable, ""),          // waited 120
		tr(602, goRunning, ""),
		tr(640, goWaiting, waitBody), // running 38, runnable 2: the first event is out
		tr(1800, goRunning, ""),
		tr(1810, goWaiting, waitBody),
		tr(1900, goWaiting, waitRequest), // (not a transition the runtime makes; ignored)
		// A request answered without a stream: left out.
		tr(2000, goRunning, ""),
		tr(2020, goWaiting, waitRequest),
		// One that the trace cut short: left out.
		tr(3000, goRunning, ""),
		tr(3010, goWaiting, waitDatabase),
	}
	reqs := requestSteps(ts)
	require.Equal(t, [][]step{{
		{kind: waitDatabase, running: 47 * us, runnable: 3 * us},
		{kind: waitDatabase, waiting: true, waited: 300 * us},
		{kind: waitUpstream, running: 30 * us},
		{kind: waitUpstream, waiting: true, waited: 120 * us},
		{kind: waitBody, running: 38 * us, runnable: 2 * us},
	}}, reqs)
	sum := summarizeSteps(append(reqs, reqs[0], []step{{kind: waitBody, running: us}}))
	require.Equal(t, 2, sum.requests)
	require.Equal(t, 3, sum.of)
	require.Equal(t, "running 47µs (+3µs runnable), waiting on the database 300µs, running 30µs, waiting on the upstream 120µs, "+
		"running 38µs (+2µs runnable) = 540µs (medians of 2 of 3 requests)", sum.String())
	require.Equal(t, "no complete request traced", summarizeSteps(nil).String())
}

// phasesTestRelay is a handler that relays an upstream's stream chunk by
// chunk: its goroutine waits for the upstream's answer, then its body.
func phasesTestRelay(upstream string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get(upstream)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		buf := make([]byte, 512)
		for {
			n, err := resp.Body.Read(buf)
			_, _ = w.Write(buf[:n])
			w.(http.Flusher).Flush()
			if err != nil {
				return
			}
		}
	}
}

// The trace of a real process: the goroutine serving a relayed stream is
// found by its handler's name, and its requests end at their first wait
// for the upstream's body, after waiting on the upstream.
func TestHandlerTransitionsReadsTheRuntimesTrace(t *testing.T) {
	// The upstream sends its second chunk only once the client has the
	// first: by then the relay has waited for the upstream's body.
	next := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-next
		_, _ = io.WriteString(w, "data: second\n\n")
	}))
	defer upstream.Close()
	relay := httptest.NewServer(phasesTestRelay(upstream.URL))
	defer relay.Close()

	var buf bytes.Buffer
	require.NoError(t, trace.Start(&buf))
	for range 5 {
		resp, err := relay.Client().Get(relay.URL)
		require.NoError(t, err)
		first, err := bufio.NewReader(resp.Body).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "data: first\n", first)
		next <- struct{}{}
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
	}
	trace.Stop()

	gs, err := handlerTransitions(&buf, "phasesTestRelay")
	require.NoError(t, err)
	var reqs [][]step
	for _, ts := range gs {
		reqs = append(reqs, requestSteps(ts)...)
	}
	require.NotEmpty(t, reqs)
	for _, r := range reqs {
		require.Equal(t, waitBody, r[len(r)-1].kind, "%+v", r)
		require.True(t, stepOf(r, waitUpstream).waiting, "no wait on the upstream: %+v", r)
	}
	_, err = handlerTransitions(bytes.NewReader([]byte("not a trace")), "x")
	require.Error(t, err)
}

// stepOf is r's first wait of kind.
func stepOf(r []step, kind waitKind) step {
	for _, s := range r {
		if s.waiting && s.kind == kind {
			return s
		}
	}
	return step{}
}

// -stream-phases reads the processes' traces: the default build refuses
// it, saying which build to run, and so does a run without concurrency 1.
func TestStreamPhasesFlagNeedsTheProfilingBuildAndConcurrencyOne(t *testing.T) {
	_, err := parseFlags([]string{"-stream-phases", "-concurrency", "16"}, io.Discard)
	require.Error(t, err)
	if !profilingBuild {
		require.ErrorContains(t, err, "go run -tags idemguard_pprof ./internal/bench")
		return
	}
	require.ErrorContains(t, err, "include 1 in -concurrency")
	_, err = parseFlags([]string{"-stream-phases"}, io.Discard)
	require.NoError(t, err)
}

// The addresses the profiling builds write: serve's <pid>.addr, the
// floor's floor-<pid>.addr; none, or an empty one, is an error that says
// which build is needed.
func TestPprofAddrReadsTheProcessesAddressFile(t *testing.T) {
	dir := t.TempDir()
	p := &proc{name: "serve-stream", cmd: &exec.Cmd{Process: &os.Process{Pid: 42}}}
	_, err := pprofAddr(dir, p, false)
	require.ErrorContains(t, err, "is it the profiling build?")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "42.addr"), []byte("127.0.0.1:6060"), 0o600))
	addr, err := pprofAddr(dir, p, false)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:6060", addr)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "floor-42.addr"), nil, 0o600))
	_, err = pprofAddr(dir, p, true)
	require.ErrorContains(t, err, "empty")
}
