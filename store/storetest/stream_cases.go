package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/testkeys"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// Streams: DoStream over the store, and the response_events column.

func withMaxStreamBytes(n int) guardOpt { return func(c *idemguard.Config) { c.MaxStreamBytes = n } }
func withMaxWaiters(n int) guardOpt     { return func(c *idemguard.Config) { c.MaxWaiters = n } }

// recorder is a StreamWriter that keeps what it was given; failAfter > 0
// makes every Write after that many fail, like a caller that hung up.
type recorder struct {
	mu        sync.Mutex
	start     *idemguard.StreamStart
	events    []idemguard.Chunk
	failAfter int
	wrote     chan struct{}
}

func newRecorder() *recorder { return &recorder{wrote: make(chan struct{}, 1000)} }

func (r *recorder) Begin(s idemguard.StreamStart) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.start != nil {
		panic("Begin called twice")
	}
	r.start = &s
}

func (r *recorder) Write(e idemguard.Chunk) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.start == nil {
		panic("Write before Begin")
	}
	if r.failAfter > 0 && len(r.events) >= r.failAfter {
		return errors.New("caller hung up")
	}
	r.events = append(r.events, e)
	r.wrote <- struct{}{}
	return nil
}

func (r *recorder) origin() idemguard.StreamOrigin {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.start == nil {
		return ""
	}
	return r.start.Origin
}

// text is the recorded events, one "type:data" per line.
func (r *recorder) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.events {
		fmt.Fprintf(&b, "%s:%s\n", e.Type, e.Data)
	}
	return b.String()
}

// chunker is a streamed operation that emits n deltas, each after a step
// the test allows (nil steps: no pauses), and fails after failAt deltas
// when failAt > 0.
type chunker struct {
	n, failAt int
	steps     chan struct{}
	runs      atomic.Int32
	emitted   atomic.Int32
}

func (c *chunker) op() idemguard.StreamOperation {
	return idemguard.StreamOperation{
		Run: func(ctx context.Context, emit func(idemguard.Chunk)) (any, error) {
			c.runs.Add(1)
			var text strings.Builder
			for i := range c.n {
				if c.steps != nil {
					select {
					case <-c.steps:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
				}
				if c.failAt > 0 && i == c.failAt {
					return nil, &idemguard.OpError{Reason: sanitize.ProviderError, Err: errors.New("upstream cut the stream")}
				}
				d := fmt.Sprintf("tok%d ", i)
				text.WriteString(d)
				emit(idemguard.Chunk{Data: mustJSON(nil, map[string]string{"delta": d})})
				c.emitted.Add(1)
			}
			emit(idemguard.Chunk{Type: "done", Data: []byte(`{"finish":"stop"}`)})
			return sanitize.Envelope{OK: true, StopReason: sanitize.Completed, Data: map[string]any{"text": text.String()}}, nil
		},
		Replay: func(env sanitize.Envelope) []idemguard.Chunk {
			return []idemguard.Chunk{{Data: mustJSON(nil, map[string]any{"delta": env.Data["text"]})},
				{Type: "done", Data: []byte(`{"finish":"stop"}`)}}
		},
	}
}

func (c *chunker) wantText() string {
	var b strings.Builder
	for i := range c.n {
		fmt.Fprintf(&b, ":{\"delta\":\"tok%d \"}\n", i)
	}
	return b.String() + "done:{\"finish\":\"stop\"}\n"
}

// streamAsync runs g.DoStream in a goroutine, for a case that steps the
// operation or starts a follower meanwhile; the result arrives on the
// channel. An error fails this case only, and the result is still sent so
// the case ends.
func streamAsync(t *testing.T, g *idemguard.Guard, call idemguard.Call, op idemguard.StreamOperation, w idemguard.StreamWriter) <-chan idemguard.Result {
	done := make(chan idemguard.Result, 1)
	go func() {
		res, err := g.DoStream(ctxFor(t), call, op, w)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	return done
}

// steppedOwner starts a stream of n chunks under key whose operation
// writes each chunk when stepped, and returns once it has written the
// first written ones: its chunker, its writer and where its result
// arrives.
func steppedOwner(t *testing.T, g *idemguard.Guard, key string, n, written int) (*chunker, *recorder, <-chan idemguard.Result) {
	c := &chunker{n: n, steps: make(chan struct{})}
	owner := newRecorder()
	done := streamAsync(t, g, streamCall(key), c.op(), owner)
	for range written {
		c.steps <- struct{}{}
		<-owner.wrote
	}
	return c, owner, done
}

func streamCall(key string) idemguard.Call {
	return idemguard.Call{Tenant: "acme", Scope: "chat", ClientKey: key, Inputs: map[string]any{"q": key}, Detach: true}
}

func storeCompleteKeepsTheEventSequenceExactly(t *testing.T, h *Harness) {
	events := []byte("data: {\"delta\":\"a\\u003c\"}\n\nevent: done\ndata: {}\n\n")
	for _, tc := range []struct {
		name   string
		events []byte
	}{{"sequence", events}, {"empty", []byte{}}, {"none", nil}} {
		kh := hash("events-" + tc.name)
		id, n := claimOne(t, h, "acme", "s", kh)
		ok, _, err := h.Store.Complete(ctxFor(t), store.CompleteParams{ID: id, Nonce: n, Status: store.RowSucceeded,
			Response: []byte(`{"ok":true,"stopReason":"completed"}`), ResponseCode: 200, Events: tc.events, TTL: time.Hour})
		require.NoError(t, err)
		require.True(t, ok)
		rec := get(t, h, "acme", "s", kh)
		require.Equal(t, string(tc.events), string(rec.Events), tc.name)
		require.Equal(t, tc.events == nil, rec.Events == nil, "%s: nil (no stream) and empty (events dropped) stay apart", tc.name)

		if tc.events != nil {
			// An expired row is claimed afresh: its events go with its answer.
			h.Age(t, "acme", "s", kh, 2*time.Hour)
			won, err := h.Store.Reclaim(ctxFor(t), store.ReclaimParams{Kind: store.ReclaimExpired, ID: id,
				OldNonce: n, OldAttempts: 1, NewNonce: nonce(), Fingerprint: hash("fp"), TTL: time.Hour, StaleAfter: time.Minute})
			require.NoError(t, err)
			require.True(t, won)
			require.Nil(t, get(t, h, "acme", "s", kh).Events, "%s: a re-claimed row keeps no events", tc.name)
		}
	}
}

// Replaying a stream row as a plain call does (without streamCall.replay) makes the replays
// arrive without Begin and without events: this case fails.
func guardStreamRunsOnceAndReplaysTheSameEvents(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	c := &chunker{n: 5}
	first := newRecorder()
	res, err := g.DoStream(ctxFor(t), streamCall("k1"), c.op(), first)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.Equal(t, idemguard.StreamLive, first.origin())
	require.Equal(t, c.wantText(), first.text())

	var replays []string
	for range 2 {
		r := newRecorder()
		res, err := g.DoStream(ctxFor(t), streamCall("k1"), c.op(), r)
		require.NoError(t, err)
		require.True(t, res.Cached)
		require.Equal(t, idemguard.StreamReplayed, r.origin())
		replays = append(replays, r.text())
	}
	require.Equal(t, first.text(), replays[0], "a replay sends the events the first caller got")
	require.Equal(t, replays[0], replays[1])
	require.EqualValues(t, 1, c.runs.Load())

	plain, err := g.Do(ctxFor(t), streamCall("k1"), func(context.Context) (any, error) { panic("must not run") })
	require.NoError(t, err)
	require.True(t, plain.Cached)
	require.Equal(t, "tok0 tok1 tok2 tok3 tok4 ", plain.Envelope.Data["text"], "a plain call gets the assembled envelope")
	require.Contains(t, h.Dump(t), `data: {"delta":"tok4 "}`, "the row holds the event sequence")
	info, err := g.Lookup(ctxFor(t), testkeys.Client(t, g, "acme", "chat", "k1"))
	require.NoError(t, err)
	require.Equal(t, "stored", info.StreamEvents)
}

func guardPlainCompletionStreamsAsItsEnvelope(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	_, err := g.Do(ctxFor(t), streamCall("k2"), func(context.Context) (any, error) {
		return sanitize.Envelope{OK: true, StopReason: sanitize.Completed, Data: map[string]any{"text": "whole answer"}}, nil
	})
	require.NoError(t, err)
	c := &chunker{n: 3}
	var texts []string
	for range 2 {
		r := newRecorder()
		res, err := g.DoStream(ctxFor(t), streamCall("k2"), c.op(), r)
		require.NoError(t, err)
		require.Equal(t, idemguard.StatusSucceeded, res.Status)
		require.Equal(t, idemguard.StreamReplayed, r.origin())
		texts = append(texts, r.text())
	}
	require.Equal(t, ":{\"delta\":\"whole answer\"}\ndone:{\"finish\":\"stop\"}\n", texts[0])
	require.Equal(t, texts[0], texts[1])
	require.Zero(t, c.runs.Load())
}

// Storing events for a failed status (streamCall.events without its status check)
// or replaying a failed stream fails this case.
func guardStreamFailureMidwayIsRetryable(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	bad := &chunker{n: 6, failAt: 3}
	r := newRecorder()
	res, err := g.DoStream(ctxFor(t), streamCall("k3"), bad.op(), r)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusFailed, res.Status)
	require.Equal(t, sanitize.ProviderError, res.StopReason)
	require.Equal(t, idemguard.StreamLive, r.origin(), "the caller had begun: it must end its stream with an error")
	require.Equal(t, 3, strings.Count(r.text(), "delta"))
	rows := h.Dump(t)
	require.NotContains(t, rows, "tok0", "a failed stream stores no events")

	good := &chunker{n: 4}
	r2 := newRecorder()
	res, err = g.DoStream(ctxFor(t), streamCall("k3"), good.op(), r2)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.Equal(t, 2, res.Attempt, "the retry runs the operation again")
	require.Equal(t, good.wantText(), r2.text())
}

// A caller that hangs up after three events: the operation still completes
// and is stored. With Call.Detach false the operation's context ends with
// the caller's and this case fails.
func guardStreamCallerHangUpStillStores(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	c := &chunker{n: 8, steps: make(chan struct{})}
	ctx, hangUp := context.WithCancel(ctxFor(t))
	r := newRecorder()
	r.failAfter = 3
	done := make(chan idemguard.Result, 1)
	go func() {
		res, _ := g.DoStream(ctx, streamCall("k4"), c.op(), r)
		done <- res
	}()
	for range 3 {
		c.steps <- struct{}{}
		<-r.wrote
	}
	hangUp()
	for range 5 {
		c.steps <- struct{}{}
	}
	res := <-done
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.EqualValues(t, 8, c.emitted.Load(), "the paid call ran to its end")

	again := newRecorder()
	res, err := g.DoStream(ctxFor(t), streamCall("k4"), c.op(), again)
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.Equal(t, c.wantText(), again.text(), "the retry replays every event")
	require.EqualValues(t, 1, c.runs.Load())
}

// A duplicate that waits in the owner's process follows the running
// stream: it gets the events as they come, before the operation ends.
// Without streamCall.attach it would only get the replay at the end,
// and the event it must see while the owner is blocked never comes.
func guardStreamFollowerGetsEveryEventLive(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h)
	c, owner, ownerDone := steppedOwner(t, g, "k5", 4, 1)

	f := newRecorder()
	fc := streamCall("k5")
	fc.Wait = 20 * time.Second
	fDone := streamAsync(t, g, fc, c.op(), f)
	select { // the first event, from the log, while the owner is blocked
	case <-f.wrote:
	case <-time.After(20 * time.Second):
		t.Fatal("the follower got no event while the owner ran")
	}
	require.Equal(t, idemguard.StreamAttached, f.origin())
	for range 3 {
		c.steps <- struct{}{}
	}
	<-ownerDone
	res := <-fDone
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.Equal(t, c.wantText(), f.text())
	require.Equal(t, owner.text(), f.text())
	require.EqualValues(t, 1, c.runs.Load())
}

// Waiters of one key are bounded: over Config.MaxWaiters a call is
// refused at once. Without admitWaiter in claimLoop.running all five wait.
func guardWaitersAreBoundedPerKey(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h, withMaxWaiters(2))
	b := newBlocker()
	go func() { _, _ = g.Do(context.Background(), call("s", "busy"), b.op) }()
	waitStarted(t, b)
	errs := make(chan error, 5)
	results := make(chan idemguard.Result, 5)
	for range 5 {
		go func() {
			c := call("s", "busy")
			c.Wait = 20 * time.Second
			res, err := g.Do(context.Background(), c, b.op)
			if err != nil {
				errs <- err
				return
			}
			results <- res
		}()
	}
	for range 3 {
		select {
		case err := <-errs:
			require.ErrorIs(t, err, idemguard.ErrTooManyWaiters)
		case <-time.After(20 * time.Second):
			t.Fatal("callers over the bound were not refused")
		}
	}
	close(b.release)
	for range 2 {
		res := <-results
		require.Equal(t, idemguard.StatusSucceeded, res.Status)
	}
	require.EqualValues(t, 1, b.runs.Load())
}

// A sequence over MaxStreamBytes is delivered whole but stored as its
// envelope; the loss is reported and replays are rebuilt from the envelope.
func guardOversizeStreamIsStoredAsItsEnvelope(t *testing.T, h *Harness) {
	var dropped atomic.Int32
	g, logs := newGuard(t, h, withMaxStreamBytes(64), withObserver(func(e idemguard.Event) {
		if e.Kind == idemguard.EventStreamDropped {
			dropped.Add(1)
		}
	}))
	c := &chunker{n: 6}
	first := newRecorder()
	_, err := g.DoStream(ctxFor(t), streamCall("k6"), c.op(), first)
	require.NoError(t, err)
	require.Equal(t, c.wantText(), first.text(), "the caller gets every event")
	require.EqualValues(t, 1, dropped.Load())
	require.Contains(t, logs.String(), "stream over the size limit")
	require.NotContains(t, h.Dump(t), "delta")
	info, err := g.Lookup(ctxFor(t), testkeys.Client(t, g, "acme", "chat", "k6"))
	require.NoError(t, err)
	require.Equal(t, "dropped", info.StreamEvents, "the key's record says the events were not stored")

	r := newRecorder()
	_, err = g.DoStream(ctxFor(t), streamCall("k6"), c.op(), r)
	require.NoError(t, err)
	require.Equal(t, ":{\"delta\":\"tok0 tok1 tok2 tok3 tok4 tok5 \"}\ndone:{\"finish\":\"stop\"}\n", r.text())
}
