package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/testkeys"
	"github.com/idemguard/idemguard/sanitize"
)

// Resumable streams: chunk IDs and Call.LastEventID (resume.go).

func withMaxLiveStreams(n int) guardOpt { return func(c *idemguard.Config) { c.MaxLiveStreams = n } }

// ids is the recorded chunks' IDs, comma-separated.
func (r *recorder) ids() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, len(r.events))
	for i, e := range r.events {
		ids[i] = e.ID
	}
	return strings.Join(ids, ",")
}

func (r *recorder) restart() idemguard.StreamRestart {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.start.Restart
}

func resumeCall(key, lastEventID string) idemguard.Call {
	c := streamCall(key)
	c.LastEventID = lastEventID
	return c
}

// wantIDs is "<run>-<from>" ... "<run>-<to>".
func wantIDs(run string, from, to int) string {
	var ids []string
	for i := from; i <= to; i++ {
		ids = append(ids, fmt.Sprintf("%s-%d", run, i))
	}
	return strings.Join(ids, ",")
}

// runOf is the attempt and execution of the first recorded chunk's ID
// ("<attempt>-<execution>"), checking the attempt.
func (r *recorder) runOf(t *testing.T, attempt int) string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotEmpty(t, r.events)
	run := r.events[0].ID[:strings.LastIndexByte(r.events[0].ID, '-')]
	require.Regexp(t, fmt.Sprintf("^%d-[0-9a-f]{8}$", attempt), run)
	return run
}

// The live chunks and every replay carry the same IDs; a replay with
// Last-Event-ID sends what follows it, so the two parts join to the whole
// answer, each chunk once. Without the IDs (or with a replay that ignores
// Call.LastEventID) this case fails.
func guardStreamResumesAfterTheLastStoredChunk(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	c := &chunker{n: 5} // 6 chunks: 5 deltas and done
	first := newRecorder()
	res, err := g.DoStream(ctxFor(t), streamCall("r1"), c.op(), first)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	run := first.runOf(t, 1)
	require.Equal(t, wantIDs(run, 1, 6), first.ids())
	require.Equal(t, 1, first.start.Attempt)

	replay := newRecorder()
	_, err = g.DoStream(ctxFor(t), streamCall("r1"), c.op(), replay)
	require.NoError(t, err)
	require.Equal(t, first.ids(), replay.ids(), "a replay carries the live chunks' IDs")

	for _, after := range []int{0, 1, 3, 6} {
		r := newRecorder()
		res, err := g.DoStream(ctxFor(t), resumeCall("r1", fmt.Sprintf("%s-%d", run, after)), c.op(), r)
		require.NoError(t, err)
		require.Equal(t, idemguard.StatusSucceeded, res.Status)
		require.Equal(t, idemguard.StreamReplayed, r.origin())
		require.Empty(t, r.restart(), "after %d", after)
		require.Equal(t, wantIDs(run, after+1, 6), r.ids(), "after %d", after)
		require.Equal(t, first.events[after:], append([]idemguard.Chunk{}, r.events...), "after %d: the rest, each chunk once", after)
	}

	beyond := newRecorder()
	_, err = g.DoStream(ctxFor(t), resumeCall("r1", run+"-7"), c.op(), beyond)
	require.NoError(t, err)
	require.Equal(t, idemguard.RestartUnavailable, beyond.restart(), "an ID past the stored sequence cannot resume")
	require.Equal(t, first.events, beyond.events)
	require.EqualValues(t, 1, c.runs.Load())
}

// A call that resumes while the execution runs in this process follows its
// live log without Call.Wait, from the chunk after its ID. Without
// prepared.follow in claimLoop.running it is answered in progress.
func guardStreamResumesLiveWithoutWaiting(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	c, owner, ownerDone := steppedOwner(t, g, "r2", 4, 2)
	run := owner.runOf(t, 1)
	r := newRecorder()
	done := streamAsync(t, g, resumeCall("r2", run+"-2"), c.op(), r)
	c.steps <- struct{}{}
	select { // the third chunk, live, while the owner is blocked again
	case <-r.wrote:
	case <-time.After(20 * time.Second):
		t.Fatal("the resumed call got no live chunk")
	}
	require.Equal(t, idemguard.StreamAttached, r.origin())
	c.steps <- struct{}{}
	<-ownerDone
	res := <-done
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.Empty(t, r.restart())
	require.Equal(t, wantIDs(run, 3, 5), r.ids())
	require.Equal(t, owner.events[2:], r.events)
	require.EqualValues(t, 1, c.runs.Load())
}

// An ID of an attempt that failed restarts from the first chunk of the
// attempt that followed, and says so: whether the call runs that attempt
// itself or replays it. Resuming by sequence number alone would splice the
// two attempts' chunks.
func guardStreamResumeNeverCrossesAttempts(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	bad := &chunker{n: 6, failAt: 3}
	first := newRecorder()
	res, err := g.DoStream(ctxFor(t), streamCall("r3"), bad.op(), first)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusFailed, res.Status)
	last := first.runOf(t, 1) + "-3"
	require.Equal(t, wantIDs(first.runOf(t, 1), 1, 3), first.ids())

	good := &chunker{n: 4}
	retry := newRecorder()
	res, err = g.DoStream(ctxFor(t), resumeCall("r3", last), good.op(), retry)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.Equal(t, idemguard.StreamLive, retry.origin())
	require.Equal(t, idemguard.RestartSuperseded, retry.restart(), "the call runs attempt 2 itself")
	require.Equal(t, wantIDs(retry.runOf(t, 2), 1, 5), retry.ids())
	require.Equal(t, good.wantText(), retry.text())

	replay := newRecorder()
	_, err = g.DoStream(ctxFor(t), resumeCall("r3", last), good.op(), replay)
	require.NoError(t, err)
	require.Equal(t, idemguard.RestartSuperseded, replay.restart())
	require.Equal(t, retry.events, replay.events, "the whole of attempt 2, from its first chunk")
	require.EqualValues(t, 1, good.runs.Load())
}

// A key answered by a plain call has no stored chunks: a replay rebuilds
// them from the envelope, and a call that resumes gets them all with
// RestartUnavailable. An invalid ID is refused before anything is written.
func guardStreamResumeOfARebuiltAnswerRestarts(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	_, err := g.Do(ctxFor(t), streamCall("r4"), func(context.Context) (any, error) {
		return sanitize.Envelope{OK: true, StopReason: sanitize.Completed, Data: map[string]any{"text": "whole"}}, nil
	})
	require.NoError(t, err)
	c := &chunker{n: 3}
	whole := newRecorder()
	_, err = g.DoStream(ctxFor(t), streamCall("r4"), c.op(), whole)
	require.NoError(t, err)
	run := whole.runOf(t, 1)
	r := newRecorder()
	_, err = g.DoStream(ctxFor(t), resumeCall("r4", run+"-1"), c.op(), r)
	require.NoError(t, err)
	require.Equal(t, idemguard.RestartUnavailable, r.restart(), "rebuilt chunks are not the execution's own")
	require.Equal(t, wantIDs(run, 1, 2), r.ids())
	require.Zero(t, c.runs.Load())

	for _, bad := range []string{"1", "1-1", "x-00000000-1", "0-00000000-1", "1-0000000-1", "1-0000000G-1",
		"1-00000000--1", "1-00000000-1-1", "1234567890-00000000-1", " 1-00000000-1"} {
		_, err := g.DoStream(ctxFor(t), resumeCall("r4-bad", bad), c.op(), newRecorder())
		require.ErrorIs(t, err, idemguard.ErrInvalidInput, bad)
	}
	_, err = g.Lookup(ctxFor(t), testkeys.Client(t, g, "acme", "chat", "r4-bad"))
	require.ErrorIs(t, err, idemguard.ErrNotFound, "an invalid ID claims nothing")
}

// Over Config.MaxLiveStreams a stream that would run is refused before it
// claims; a stream that ends gives its place back. Without the
// reservation the second stream runs.
func guardLiveStreamsAreBoundedPerProcess(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h, withMaxLiveStreams(1))
	c, _, done := steppedOwner(t, g, "r5", 2, 1)

	other := &chunker{n: 1}
	_, err := g.DoStream(ctxFor(t), streamCall("r5-other"), other.op(), newRecorder())
	require.ErrorIs(t, err, idemguard.ErrTooManyLiveStreams)
	require.Zero(t, other.runs.Load())
	_, err = g.Lookup(ctxFor(t), testkeys.Client(t, g, "acme", "chat", "r5-other"))
	require.ErrorIs(t, err, idemguard.ErrNotFound, "a refused stream claims nothing")

	c.steps <- struct{}{}
	require.Equal(t, idemguard.StatusSucceeded, (<-done).Status)
	res, err := g.DoStream(ctxFor(t), streamCall("r5-other"), other.op(), newRecorder())
	require.NoError(t, err, "the ended stream gave its place back")
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
}

// Two executions with one attempt number (the key expired and ran again as
// attempt 1) are told apart by the ID's execution tag: an ID of the old run
// restarts the new one, an ID of the new run resumes it. Comparing attempt
// numbers alone resumes the new run after the old run's chunk.
func guardStreamResumeTellsExecutionsOfOneAttemptApart(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	c := &chunker{n: 3}
	old := newRecorder()
	_, err := g.DoStream(ctxFor(t), streamCall("r6"), c.op(), old)
	require.NoError(t, err)
	oldRun := old.runOf(t, 1)
	h.Age(t, "acme", "chat", testkeys.Client(t, g, "acme", "chat", "r6").Hash(), 48*time.Hour)

	again := newRecorder()
	res, err := g.DoStream(ctxFor(t), resumeCall("r6", oldRun+"-2"), c.op(), again)
	require.NoError(t, err)
	require.Equal(t, 1, res.Attempt, "an expired key runs again as attempt 1")
	newRun := again.runOf(t, 1)
	require.NotEqual(t, oldRun, newRun)
	require.Equal(t, idemguard.RestartSuperseded, again.restart())

	stale := newRecorder()
	_, err = g.DoStream(ctxFor(t), resumeCall("r6", oldRun+"-2"), c.op(), stale)
	require.NoError(t, err)
	require.Equal(t, idemguard.RestartSuperseded, stale.restart(), "the old run's ID does not resume the new run")
	require.Equal(t, again.events, stale.events)

	rest := newRecorder()
	_, err = g.DoStream(ctxFor(t), resumeCall("r6", newRun+"-2"), c.op(), rest)
	require.NoError(t, err)
	require.Empty(t, rest.restart())
	require.Equal(t, again.events[2:], append([]idemguard.Chunk{}, rest.events...))
	require.EqualValues(t, 2, c.runs.Load())
}

// A call that resumes late in a long stream follows the live log after its
// ID even when the log has let its first chunks go (it keeps at most
// MaxStreamBytes): it needs none of them. Attaching from the first chunk
// finds them gone and answers in progress.
func guardStreamResumesLiveAfterTheLogDroppedItsStart(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h, withMaxStreamBytes(128)) // the log keeps the last four or five chunks
	c, owner, ownerDone := steppedOwner(t, g, "r7", 12, 8)
	run := owner.runOf(t, 1)
	r := newRecorder()
	done := streamAsync(t, g, resumeCall("r7", run+"-7"), c.op(), r)
	select { // the eighth chunk, from the log, while the owner is blocked
	case <-r.wrote:
	case res := <-done:
		t.Fatalf("the resumed call ended without a chunk: %+v", res)
	case <-time.After(20 * time.Second):
		t.Fatal("the resumed call got no chunk")
	}
	require.Equal(t, idemguard.StreamAttached, r.origin())
	for range 4 { // in step with the resumed call: a slower one would fall behind the short log
		c.steps <- struct{}{}
		<-r.wrote
	}
	require.Equal(t, idemguard.StatusSucceeded, (<-ownerDone).Status)
	res := <-done
	require.Equal(t, idemguard.StatusSucceeded, res.Status, "it has every chunk after its ID")
	require.Equal(t, wantIDs(run, 8, 13), r.ids())
	require.Equal(t, owner.events[7:], append([]idemguard.Chunk{}, r.events...))
	require.EqualValues(t, 1, c.runs.Load())
}
