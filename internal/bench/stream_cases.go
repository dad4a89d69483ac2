package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"
)

// streamCases are the stream suite's measured cases: the floor's relay,
// without and with a claim, and serve's owner, follower and resumed
// streams, each with its times to first event.
type streamCases struct {
	sb   *streamBench
	seq  atomic.Int64
	ttfe map[string]*durations
	// perOp is the events each case's operation reads.
	perOp map[string]int
}

const (
	caseFloor    = "floor-stream"
	caseClaimed  = "floor-stream-claimed"
	caseOwner    = "serve-stream"
	caseFollower = "serve-follower"
	caseResumed  = "serve-resumed"
)

func newStreamCases(sb *streamBench) *streamCases {
	all := streamChunks + 2
	return &streamCases{sb: sb,
		ttfe:  map[string]*durations{caseFloor: {}, caseClaimed: {}, caseOwner: {}, caseFollower: {}, caseResumed: {}},
		perOp: map[string]int{caseFloor: all, caseClaimed: all, caseOwner: all, caseFollower: all, caseResumed: all - resumeAfter}}
}

func (sc *streamCases) reset() {
	for _, d := range sc.ttfe {
		d.reset()
	}
}

// key is a fresh key and its content.
func (sc *streamCases) key(prefix string) (string, string) {
	n := strconv.FormatInt(sc.seq.Add(1), 10)
	return prefix + "-" + n, "stream " + prefix + " " + n
}

// check records a read's time to first event, or says why it is wrong.
func (sc *streamCases) check(name string, got streamGot) error {
	if got.events != sc.perOp[name] {
		return fmt.Errorf("%s: %d events, want %d", name, got.events, sc.perOp[name])
	}
	sc.ttfe[name].add(got.first)
	return nil
}

func (sc *streamCases) cases() []benchCase {
	sb := sc.sb
	floorURL, serveURL := sb.floor.url+"/floor/stream/"+streamScope, sb.serve.url+"/v1/ops/"+streamScope
	claimedURL := sb.floor.url + "/floor/stream-claimed/" + streamScope
	plain := func(name, url string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			key, content := sc.key(name)
			got, err := sb.do(ctx, streamReq{url: url, key: key, content: content})
			if err != nil {
				return err
			}
			return sc.check(name, got)
		}
	}
	// follower: a second request for the key once the owner has its first
	// event; it follows the owner's live log in the same process.
	follower := func(ctx context.Context) error {
		key, content := sc.key(caseFollower)
		begun, owner := make(chan struct{}), make(chan error, 1)
		go func() {
			_, err := sb.do(ctx, streamReq{url: serveURL, key: key, content: content, firstEvent: func() { close(begun) }})
			owner <- err
		}()
		select {
		case <-begun:
		case err := <-owner:
			return fmt.Errorf("%s: the owner ended before its first event: %w", caseFollower, err)
		}
		got, err := sb.do(ctx, streamReq{url: serveURL, key: key, content: content, wait: true})
		if err = errors.Join(err, <-owner); err != nil {
			return err
		}
		return sc.check(caseFollower, got)
	}
	// resumed: the owner hangs up after resumeAfter events and asks again
	// with Last-Event-ID.
	resumed := func(ctx context.Context) error {
		key, content := sc.key(caseResumed)
		cut, err := sb.do(ctx, streamReq{url: serveURL, key: key, content: content, cutAfter: resumeAfter})
		if err != nil {
			return err
		}
		got, err := sb.do(ctx, streamReq{url: serveURL, key: key, content: content, lastEventID: cut.lastID, wait: true})
		if err != nil {
			return err
		}
		return sc.check(caseResumed, got)
	}
	cpu := cpuOf(sb.serve)
	return []benchCase{
		{name: caseFloor, cpu: cpuOf(sb.floor), op: plain(caseFloor, floorURL)},
		{name: caseClaimed, baseline: caseFloor, cpu: cpuOf(sb.floor), op: plain(caseClaimed, claimedURL)},
		{name: caseOwner, baseline: caseFloor, cpu: cpu, op: plain(caseOwner, serveURL)},
		{name: caseFollower, baseline: caseFloor, cpu: cpu, op: follower},
		{name: caseResumed, baseline: caseFloor, cpu: cpu, op: resumed},
	}
}

// notes adds each row's events/s and time to first event, and for serve's
// rows their ratios to the floor's.
func (sc *streamCases) notes(rows []row) []row {
	var floorRate float64
	floorFirst := sc.ttfe[caseFloor].median()
	for _, r := range rows {
		if r.Case == caseFloor {
			floorRate = r.OpsPerSec * float64(sc.perOp[caseFloor])
		}
	}
	for i := range rows {
		rate := rows[i].OpsPerSec * float64(sc.perOp[rows[i].Case])
		first := sc.ttfe[rows[i].Case].median()
		rows[i].Note = fmt.Sprintf("events/s %.0f; time to first event p50 %s", rate, first.Round(time.Microsecond))
		if rows[i].Case != caseFloor && floorRate > 0 && floorFirst > 0 {
			rows[i].Note += fmt.Sprintf(" (vs floor: events/s ×%.2f, time to first event ×%.2f)", rate/floorRate, float64(first)/float64(floorFirst))
		}
	}
	return rows
}
