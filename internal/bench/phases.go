package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// Where a stream's first event waits, by the goroutine that serves it
// (-stream-phases)
//
// The time to first event says how long a stream waits, not where. After
// the stream suite's c=1 rounds, -stream-phases runs serve-stream and
// floor-stream-claimed once more, unmeasured, for phaseTraceTime each while
// a runtime trace of the process serving them is taken (net/http/pprof's
// /debug/pprof/trace of the profiling build). The goroutine that serves a
// stream's connection goes, per request, from running to waiting and back:
// each wait is classed by the stack it blocked in (the next request, the
// database, the HTTP client's connection, the upstream's body), and the
// request's steps, from its arrival to its first wait for the upstream's
// body, are summed by step. The bench's upstream sends its first chunk with
// its headers, so by that wait the first event is written. The steps say
// whether a guarded stream's extra time is its own running code, or waiting
// (on a thread, the database, the upstream).

// phaseTraceTime is how long each traced run lasts.
const phaseTraceTime = 3 * time.Second

// waitKind classes a wait of a handler's goroutine.
type waitKind string

const (
	waitRequest  waitKind = "request"  // the connection's next request
	waitDatabase waitKind = "database" // a statement's answer
	waitUpstream waitKind = "upstream" // the upstream call's request written, or its headers
	waitBody     waitKind = "body"     // the upstream's next chunk
	waitOther    waitKind = "other"
)

// classify is the wait of a goroutine that blocked with the stack frames
// (function names, innermost first).
func classify(frames []string) waitKind {
	has := func(s string) bool {
		return slices.ContainsFunc(frames, func(f string) bool { return strings.Contains(f, s) })
	}
	switch {
	case has("github.com/go-sql-driver/mysql."):
		return waitDatabase
	case has("net/http.(*bodyEOFSignal).Read"): // a client's response body, not a request's
		return waitBody
	case has("net/http.(*persistConn).roundTrip"):
		return waitUpstream
	case has("net/http.(*conn).readRequest"), idleConn(frames):
		return waitRequest
	}
	return waitOther
}

// idleConn is whether frames are a connection's wait for its next request:
// net/http's conn.serve peeking into its reader between requests (every
// wait of a handler runs inside conn.serve too, under the handler's frames).
func idleConn(frames []string) bool {
	i := slices.Index(frames, "net/http.(*conn).serve")
	return i > 0 && frames[i-1] == "bufio.(*Reader).Peek"
}

// goState is what a goroutine does after a transition: running (on a
// thread, or in a system call), runnable (waiting for a thread), waiting
// (blocked), or gone.
type goState int

const (
	goRunning goState = iota
	goRunnable
	goWaiting
	goGone
)

// goTransition is one state change of a goroutine.
type goTransition struct {
	at    time.Duration // trace time
	state goState
	wait  waitKind // what a waiting goroutine waits for
}

// step is one stretch of a request on its goroutine: running until it
// waits for kind (running: on a thread or in a system call; runnable:
// ready, without a thread), or, waiting, that wait.
type step struct {
	kind              waitKind
	waiting           bool
	running, runnable time.Duration
	waited            time.Duration
}

// requestSteps splits a handler goroutine's transitions (in time order)
// into the steps of each request, from the request's arrival to its first
// wait for the upstream's body. A request whose goroutine waits for the
// next request first (it was answered without a stream) is left out.
func requestSteps(ts []goTransition) [][]step {
	var (
		out       [][]step
		cur       []step
		in        bool
		state     = goGone
		wait      waitKind
		since     time.Duration
		run, rnbl time.Duration
	)
	for _, t := range ts {
		d := t.at - since
		if in {
			switch state {
			case goRunning:
				run += d
			case goRunnable:
				rnbl += d
			case goWaiting:
				cur = append(cur, step{kind: wait, waiting: true, waited: d})
			}
		}
		if state == goWaiting && wait == waitRequest && t.state != goWaiting {
			in, cur, run, rnbl = true, nil, 0, 0 // a request arrived
		}
		if in && t.state == goWaiting {
			cur = append(cur, step{kind: t.wait, running: run, runnable: rnbl})
			run, rnbl = 0, 0
			switch t.wait {
			case waitRequest:
				in = false
			case waitBody:
				out, in = append(out, cur), false
			}
		}
		if in && t.state == goGone {
			in = false
		}
		state, wait, since = t.state, t.wait, t.at
	}
	return out
}

// phaseSummary is the median of each step over the requests that took the
// most common sequence of steps.
type phaseSummary struct {
	steps    []step // medians
	requests int    // requests of that sequence
	of       int    // requests in all
}

func summarizeSteps(reqs [][]step) phaseSummary {
	signature := func(ss []step) string {
		var b strings.Builder
		for _, s := range ss {
			if s.waiting {
				b.WriteString("w:")
			}
			b.WriteString(string(s.kind))
			b.WriteByte(' ')
		}
		return b.String()
	}
	sigs := make([]string, len(reqs))
	count := map[string]int{}
	best := ""
	for i, r := range reqs {
		sigs[i] = signature(r)
		count[sigs[i]]++
		if c := count[sigs[i]]; c > count[best] || (c == count[best] && sigs[i] < best) {
			best = sigs[i]
		}
	}
	var same [][]step
	for i, r := range reqs {
		if sigs[i] == best {
			same = append(same, r)
		}
	}
	sum := phaseSummary{requests: len(same), of: len(reqs)}
	if len(same) == 0 {
		return sum
	}
	median := func(f func(step) time.Duration, i int) time.Duration {
		d := &durations{}
		for _, r := range same {
			d.add(f(r[i]))
		}
		return d.median()
	}
	for i, s := range same[0] {
		sum.steps = append(sum.steps, step{kind: s.kind, waiting: s.waiting,
			running:  median(func(s step) time.Duration { return s.running }, i),
			runnable: median(func(s step) time.Duration { return s.runnable }, i),
			waited:   median(func(s step) time.Duration { return s.waited }, i)})
	}
	return sum
}

// String is the summary as a note: each step's median and their sum.
func (p phaseSummary) String() string {
	if p.requests == 0 {
		return "no complete request traced"
	}
	var b strings.Builder
	var total time.Duration
	for i, s := range p.steps {
		if i > 0 {
			b.WriteString(", ")
		}
		if s.waiting {
			fmt.Fprintf(&b, "waiting on the %s %s", s.kind, us(s.waited))
			total += s.waited
			continue
		}
		fmt.Fprintf(&b, "running %s", us(s.running))
		if s.runnable >= time.Microsecond {
			fmt.Fprintf(&b, " (+%s runnable)", us(s.runnable))
		}
		total += s.running + s.runnable
	}
	fmt.Fprintf(&b, " = %s (medians of %d of %d requests)", us(total), p.requests, p.of)
	return b.String()
}

func us(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) + "µs" }

// handlerTransitions reads a runtime trace and returns the transitions of
// each goroutine that ran a function whose name contains marker.
func handlerTransitions(r io.Reader, marker string) (map[trace.GoID][]goTransition, error) {
	rd, err := trace.NewReader(r)
	if err != nil {
		return nil, err
	}
	all := map[trace.GoID][]goTransition{}
	marked := map[trace.GoID]bool{}
	var frames []string
	for {
		ev, err := rd.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		frames = frames[:0]
		for f := range st.Stack.Frames() {
			frames = append(frames, f.Func)
		}
		if !marked[id] && slices.ContainsFunc(frames, func(f string) bool { return strings.Contains(f, marker) }) {
			marked[id] = true
		}
		t := goTransition{at: time.Duration(ev.Time())}
		switch _, to := st.Goroutine(); to {
		case trace.GoRunning, trace.GoSyscall:
			t.state = goRunning
		case trace.GoRunnable:
			t.state = goRunnable
		case trace.GoWaiting:
			t.state, t.wait = goWaiting, classify(frames)
		default:
			t.state = goGone
		}
		all[id] = append(all[id], t)
	}
	for id := range all {
		if !marked[id] {
			delete(all, id)
		}
	}
	return all, nil
}

// tracePhases runs op at concurrency 1 for phaseTraceTime while the
// profiling build listening on pprofAddr records a runtime trace, and
// summarizes the requests of the goroutines that ran marker.
func (e *env) tracePhases(ctx context.Context, pprofAddr, marker string, op func(context.Context) error) (phaseSummary, error) {
	type result struct {
		body []byte
		err  error
	}
	got := make(chan result, 1)
	seconds := strconv.Itoa(int(phaseTraceTime / time.Second))
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+pprofAddr+"/debug/pprof/trace?seconds="+seconds, nil)
		if err != nil {
			got <- result{err: err}
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- result{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET /debug/pprof/trace: %s: %s", resp.Status, body)
		}
		got <- result{body: body, err: err}
	}()
	// The load outlasts the trace a little: its last requests are whole.
	if _, err := e.runFor(ctx, 1, phaseTraceTime+phaseTraceTime/10, op, nil); err != nil {
		return phaseSummary{}, err
	}
	r := <-got
	if r.err != nil {
		return phaseSummary{}, r.err
	}
	gs, err := handlerTransitions(bytes.NewReader(r.body), marker)
	if err != nil {
		return phaseSummary{}, fmt.Errorf("reading the trace: %w", err)
	}
	var reqs [][]step
	for _, ts := range gs {
		reqs = append(reqs, requestSteps(ts)...)
	}
	return summarizeSteps(reqs), nil
}

// pprofAddr is the net/http/pprof address the profiling build of process
// p wrote to dir: <pid>.addr for serve, floor-<pid>.addr for the floor
// (internal/benchpprof.Serve).
func pprofAddr(dir string, p *proc, floor bool) (string, error) {
	name := strconv.Itoa(p.cmd.Process.Pid) + ".addr"
	if floor {
		name = "floor-" + name
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err == nil && len(bytes.TrimSpace(b)) == 0 {
		err = errors.New("the address file is empty")
	}
	if err != nil {
		return "", fmt.Errorf("-stream-phases: %s serves no net/http/pprof (is it the profiling build?): %w", p.name, err)
	}
	return string(bytes.TrimSpace(b)), nil
}
