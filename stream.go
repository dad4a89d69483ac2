package idemguard

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemguard/idemguard/internal/live"
	"github.com/idemguard/idemguard/internal/testhooks"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// Streams
//
// A streamed operation delivers its answer in chunks while it runs (the
// pieces of a model's answer). DoStream guards it like Do: it runs once per
// key, a duplicate gets the stored answer, a failure is retryable. What
// differs is delivery:
//
//   - The owner relays each chunk to its caller as the operation emits it,
//     and collects the sequence. A success is stored as the chunk sequence
//     (in its wire form, response_events) and the envelope the operation
//     returned, so a plain Do for the key gets the envelope and a DoStream
//     gets the chunks, byte for byte the same on every replay.
//   - A caller that hangs up does not stop the operation when the Call is
//     Detach: the chunks go on being collected and stored.
//   - A duplicate that waits (Call.Wait) in the owner's process follows the
//     running execution's chunks from the first one (internal/live); in
//     another process it waits for the row and replays the stored sequence.
//     It follows the execution the row names (attempt and claim nonce), and
//     only that one: never an old owner's execution that outlived its claim.
//   - A sequence over Config.MaxStreamBytes is delivered but stored without
//     its chunks; the loss is logged and reported (EventStreamDropped), and
//     replays are rebuilt from the envelope (StreamOperation.Replay). The
//     live log a duplicate follows holds the same bytes: a follower slower
//     than the owner that falls behind reads the rest from the stored
//     sequence, and when none was stored it is answered failed (its chunks
//     are incomplete), never succeeded with a gap.
//
// Waiters are bounded per key and tenant in each process (Config.MaxWaiters):
// a call over the bound gets ErrTooManyWaiters at once, for plain calls too.

// Defaults of Config's stream settings.
const (
	// DefaultMaxStreamBytes bounds a stored chunk sequence, and the live
	// log of a running one (1 MiB).
	DefaultMaxStreamBytes = 1 << 20
	// DefaultMaxWaiters bounds the calls of one process waiting for (or
	// following) one running key.
	DefaultMaxWaiters = 100
	// DefaultMaxLiveStreams bounds the streams one process runs at once.
	DefaultMaxLiveStreams = 512
)

// Chunk is one piece of a streamed answer, sent to the caller as one
// server-sent event. It is not an Event: an Event says what happened to a
// key, a Chunk is part of the answer itself, stored and replayed byte for
// byte. The operation builds it from the fields it chose to keep, never
// from an upstream's raw bytes: what a stream carries is stored and
// replayed to every caller of the key.
type Chunk struct {
	// ID is the chunk's place in its execution's sequence,
	// "<attempt>-<execution>-<n>" (the execution a tag of eight hex digits,
	// n from 1), set by the guard on every chunk it delivers: the live
	// chunks and every replay of them carry the same IDs, and
	// Call.LastEventID resumes after one. An operation's own ID is ignored,
	// and IDs are not stored.
	ID string
	// Type is the chunk's type ("" for the default, message). One line.
	Type string
	// Data is the chunk's payload, usually one JSON document. It must not
	// contain a carriage return (line feeds split it into data lines).
	Data []byte
}

// StreamOperation is guarded work that delivers its answer as chunks.
type StreamOperation struct {
	// Run does the work. It calls emit with each chunk as soon as it has it
	// (emit never blocks on a caller that is gone) and returns the assembled
	// answer as an Operation does: the envelope a plain call for the key
	// gets. An error, even after chunks were emitted, is a failure: nothing
	// is stored as a success and the key may run again. Required.
	Run func(ctx context.Context, emit func(Chunk)) (any, error)
	// Replay renders a stored answer that has no chunks (the key completed
	// by a plain call, or a sequence over the size limit) as chunks. nil:
	// one chunk whose data is the envelope's JSON.
	Replay func(sanitize.Envelope) []Chunk
}

// StreamOrigin says where a streamed call's chunks come from.
type StreamOrigin string

const (
	// StreamLive: this call runs the operation; chunks arrive as it emits them.
	StreamLive StreamOrigin = "live"
	// StreamAttached: a duplicate in the owner's process follows the running
	// execution from its first chunk.
	StreamAttached StreamOrigin = "attached"
	// StreamReplayed: the stored answer of an earlier execution.
	StreamReplayed StreamOrigin = "replayed"
)

// StreamStart is what StreamWriter.Begin learns before the first chunk.
type StreamStart struct {
	Origin  StreamOrigin
	KeyHash string
	// CompletedAt is when the replayed answer was stored (StreamReplayed).
	CompletedAt time.Time
	// Attempt is the execution whose chunks follow (their IDs start with it).
	Attempt int
	// Replaced is, on the live stream of a forced run (Call.ForceNew), the
	// attempt whose stored answer it replaces; 0 otherwise.
	Replaced int
	// Restart is set when the call asked to resume (Call.LastEventID) but
	// the chunks start again from the attempt's first: the caller drops what
	// it has of the earlier stream.
	Restart StreamRestart
}

// StreamRestart says why a stream asked to resume starts again from its
// first chunk.
type StreamRestart string

const (
	// RestartSuperseded: the ID names another execution than the one
	// delivered (an attempt that failed or was taken over, or this call runs
	// the operation itself).
	RestartSuperseded StreamRestart = "superseded"
	// RestartUnavailable: the chunks after the ID cannot be delivered as
	// they were (the answer was stored without its chunks, or holds fewer).
	RestartUnavailable StreamRestart = "unavailable"
)

// StreamWriter receives a streamed call's chunks, on the goroutine that
// called DoStream.
type StreamWriter interface {
	// Begin is called once, before the first chunk.
	Begin(StreamStart)
	// Write delivers one chunk. An error means the caller is gone: no
	// further chunk is written, and the operation goes on (Call.Detach).
	Write(Chunk) error
}

// DoStream is Do for a streamed operation: op runs at most once for the key,
// and w receives its chunks live (the owner, or a waiting duplicate in the
// owner's process) or as stored (a replay).
//
// When DoStream returns, w has received every chunk of a StatusSucceeded
// answer, in order. Any other answer after Begin (the operation failed
// mid-stream, or a follower could not learn the outcome in time) means the
// chunks were incomplete: end the caller's stream with an error. Without
// Begin the Result is answered as Do's would be (in progress, a stored
// failure, an error). A Call with Detach keeps the operation running, and
// its answer is stored, when the caller hangs up.
func (g *Guard) DoStream(ctx context.Context, call Call, op StreamOperation, w StreamWriter) (Result, error) {
	if op.Run == nil || w == nil {
		return Result{}, fmt.Errorf("%w: StreamOperation.Run and the StreamWriter are required", ErrInvalidInput)
	}
	after, err := parseChunkID(call.LastEventID)
	if err != nil {
		return Result{}, fmt.Errorf("%w: Call.LastEventID: %w", ErrInvalidInput, err)
	}
	return g.call(ctx, call, &streamCall{g: g, op: op, w: w, ctx: ctx, after: after})
}

// streamCall is DoStream's delivery (delivery.go).
var _ delivery = (*streamCall)(nil)

// setup binds the call. The replay cache holds envelopes, not events, and
// the read before the claim is the plain call's: the row answers.
// A call that resumes follows a running execution in this process even
// without Call.Wait; a call that may claim takes its place among the
// process's live streams first (resume.go).
func (s *streamCall) setup(p prepared) prepared {
	p.noCache, p.noReadFirst = true, true
	p.follow = s.after.set
	p.check = s.reserveBefore(p.check)
	s.p, s.key = p, keyOf(p)
	return p
}

func (s *streamCall) run(ctx context.Context, g *Guard, p prepared, o owned) (Result, error) {
	s.exec, s.replaced = live.Run{Attempt: o.attempt, Nonce: o.nonce}, o.replaced
	return g.runOwned(ctx, p, s.operation(), o)
}

func (s *streamCall) beat(*Guard, prepared) {}

// end renders, as events, a success answered without them (an operation
// that emitted none).
func (s *streamCall) end(res Result, err error) (Result, error) {
	s.release()
	if err == nil && res.Status == StatusSucceeded && !s.begun {
		s.begin(StreamStart{Origin: StreamReplayed, KeyHash: s.p.keyHash, CompletedAt: res.CompletedAt, Attempt: res.Attempt}, s.exec.Nonce, rebuilt)
		s.writeAll(s.fromAnswer(res, s.p.keep != nil))
	}
	return res, err
}

// streamCall is one DoStream call's state.
type streamCall struct {
	g   *Guard
	p   prepared
	op  StreamOperation
	w   StreamWriter
	ctx context.Context
	key live.Key

	begun bool
	gone  bool // w failed: the caller hung up
	// sent is the sequence number of the last event w has (written, or
	// received before the resume: after).
	sent  int
	after chunkID // Call.LastEventID
	slot  bool    // this call holds a place among the live streams

	mu       sync.Mutex // the owner's collection, against a stray emit
	log      *live.Log
	done     bool
	wire     []byte // the collected sequence in wire form
	over     bool   // wire went over MaxStreamBytes and was let go
	emitted  int    // the owner's events so far
	attempt  int    // the attempt whose events this call delivers (their IDs)
	replaced int    // a forced run's: the attempt it replaces (StreamStart.Replaced)
	tag      string // the execution whose events this call delivers (runTag)

	// exec is the execution this call runs (the owner) or followed (a
	// follower, follow true); complete: the follower read its live log to
	// the end, so it has every chunk.
	exec     live.Run
	follow   bool
	complete bool
}

// write writes e as event number seq of the attempt delivered.
func (s *streamCall) write(e Chunk, seq int) {
	if s.gone {
		return
	}
	e.ID = formatChunkID(s.attempt, s.tag, seq)
	if s.ctx.Err() != nil || s.w.Write(e) != nil {
		s.gone = true
		return
	}
	s.sent = seq
}

// writeAll writes the events after those w has: a follower that lagged,
// or a call that resumes, has the first ones.
func (s *streamCall) writeAll(events []Chunk) {
	for i := s.sent; i < len(events); i++ {
		s.write(events[i], i+1)
	}
}

// operation wraps op.Run for the claim protocol: the owner opens the key's
// live log, so that waiting duplicates in this process can follow it, and
// relays and collects every event.
func (s *streamCall) operation() Operation {
	return func(ctx context.Context) (v any, err error) {
		s.mu.Lock()
		s.log = s.g.hub.Open(s.key, s.exec)
		s.mu.Unlock()
		ended := false
		defer func() {
			if !ended { // a panic: followers learn of a failure
				s.endLog(&streamEnded{reason: sanitize.Unknown})
			}
		}()
		v, err = s.op.Run(ctx, s.emit)
		ended = true
		if err != nil {
			s.endLog(&streamEnded{reason: s.g.classify(s.p, ctx, err)})
			return v, err
		}
		s.endLog(nil)
		return v, nil
	}
}

func (s *streamCall) endLog(err error) {
	s.mu.Lock()
	s.done = true
	l := s.log
	s.mu.Unlock()
	if l != nil {
		l.Close(err)
	}
}

// emit is the owner's emit: it records the event, hands it to followers
// and writes it to the caller.
func (s *streamCall) emit(e Chunk) {
	le := live.Event{Type: e.Type, Data: e.Data}
	if le.Valid() != nil || bytes.IndexByte(e.Data, '\r') >= 0 {
		s.g.log.Error("guard: a stream event with a line break in its type or a carriage return in its data was dropped (a programming error of the operation)",
			s.g.attrs(s.p)...)
		return
	}
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	if !s.over {
		s.wire = live.AppendSSE(s.wire, le)
		if len(s.wire) > s.g.maxStreamBytes() {
			s.over, s.wire = true, nil
		}
	}
	s.log.Append(le)
	s.emitted++
	seq := s.emitted
	s.mu.Unlock()
	s.begin(StreamStart{Origin: StreamLive, KeyHash: s.p.keyHash, Attempt: s.exec.Attempt, Replaced: s.replaced}, s.exec.Nonce, 0)
	s.write(e, seq)
}

// events is what the commit stores as response_events: the sequence of a
// succeeded stream, empty when it was over the limit (reported here, once),
// nil for a failure.
func (s *streamCall) events(status store.RowStatus) []byte {
	if status != store.RowSucceeded {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over {
		s.g.emit(Event{Kind: EventStreamDropped, Scope: s.p.scope})
		s.g.log.Warn("guard: stream over the size limit; stored without its events, replays are rebuilt from the envelope",
			s.g.attrs(s.p, slog.Int("limit_bytes", s.g.maxStreamBytes()))...)
		return []byte{}
	}
	if s.wire == nil {
		return []byte{}
	}
	return s.wire
}

func (g *Guard) maxStreamBytes() int { return cmp.Or(g.cfg.MaxStreamBytes, DefaultMaxStreamBytes) }

// fromAnswer renders a stored answer without events: a document (Call.Keep)
// as itself, in one chunk; an envelope by StreamOperation.Replay, or as its
// JSON in one chunk.
func (s *streamCall) fromAnswer(res Result, document bool) []Chunk {
	if document && !s.g.defect(testhooks.DefectBlankDocument) {
		return []Chunk{{Data: bytes.ReplaceAll(res.Body, []byte("\r"), nil)}}
	}
	env := res.Envelope
	env.Cached = false // the same bytes on every replay
	if s.op.Replay != nil {
		return s.op.Replay(env)
	}
	body, err := sanitize.Marshal(env)
	if err != nil {
		return nil
	}
	return []Chunk{{Data: body}}
}

// streamEnded is why a live log ended without success.
type streamEnded struct{ reason sanitize.StopReason }

func (e *streamEnded) Error() string { return "stream ended: " + string(e.reason) }

// replay replays a succeeded row as events: the stored sequence, or the
// answer rendered by fromAnswer. A follower (s.sent events written) gets
// the rest of the stored sequence; one that fell behind an execution whose
// sequence was not stored cannot be completed, and is answered failed.
func (s *streamCall) replay(ctx context.Context, g *Guard, p prepared, rec store.Record, readAt time.Time) (Result, error) {
	res, err := g.replay(ctx, p, rec, readAt)
	if err != nil {
		return Result{}, err
	}
	events, err := parseWire(rec.Events)
	if err != nil {
		return Result{}, g.storeErr(ctx, p, "read", err)
	}
	avail := len(events)
	switch {
	case len(events) > 0:
	case s.follow && s.sent > 0 && !s.complete && !g.defect(testhooks.DefectFollowerGap):
		g.log.Warn("guard: a stream follower fell behind an answer stored without its events (over the size limit); answered failed",
			g.attrs(p, slog.Int("limit_bytes", g.maxStreamBytes()), slog.Int("relayed", s.sent))...)
		return s.incomplete(p, rec), nil
	case s.follow && s.complete && s.sent > 0:
		// It has every chunk of the execution (one that emitted none is
		// rendered below, as for its owner and every replay).
	default:
		document := false
		if st, err := decodeStored(rec); err == nil {
			document = st.document != nil
		}
		events, avail = s.fromAnswer(res, document), rebuilt
	}
	s.begin(StreamStart{Origin: StreamReplayed, KeyHash: p.keyHash, CompletedAt: res.CompletedAt, Attempt: rec.Attempts}, rec.ClaimNonce, avail)
	s.writeAll(events) // a follower, or a call that resumes, has the first ones
	g.replayed(p, res, rec.Now, false)
	return res, nil
}

// incomplete is the answer of a follower whose chunks cannot be completed:
// failed, stop reason unknown (DoStream: the chunks were incomplete).
func (s *streamCall) incomplete(p prepared, rec store.Record) Result {
	env := sanitize.Failure(sanitize.Unknown)
	body, _ := sanitize.Marshal(env)
	return Result{Status: StatusFailed, Envelope: env, Body: body, StatusCode: http.StatusBadGateway,
		StopReason: env.StopReason, Attempt: rec.Attempts, FirstSeen: rec.CreatedAt, KeyHash: p.keyHash}
}

// attach follows the running execution the row names, if it runs in this
// process, from its first event. done is false when there is none to
// follow here (the owner runs elsewhere, the log open here is another
// execution's, or this call followed one already): the call then waits for
// the row like any other.
func (s *streamCall) attach(l *claimLoop, rec store.Record) (res Result, err error, done bool) {
	if s.follow {
		return Result{}, nil, false
	}
	run := live.Run{Attempt: rec.Attempts, Nonce: rec.ClaimNonce}
	logRun := run
	if open, ok := l.g.hub.Current(s.key); ok && l.g.defect(testhooks.DefectSplice) {
		logRun = open
	}
	from := 0 // a call that resumes this execution follows it after its ID
	if s.after.names(rec.Attempts, rec.ClaimNonce) {
		from = s.after.seq
	}
	cur, err := l.g.hub.Attach(s.key, logRun, from)
	switch {
	case errors.Is(err, live.ErrTooManyWatchers):
		return Result{}, ErrTooManyWaiters, true
	case err != nil:
		return Result{}, nil, false
	}
	defer cur.Close()
	s.follow, s.exec = true, run
	s.begin(StreamStart{Origin: StreamAttached, KeyHash: l.p.keyHash, Attempt: rec.Attempts}, rec.ClaimNonce, followed)
	l.g.noteInProgress(l.p, rec, store.InProgressAttached)
	for {
		e, err := cur.Next(l.ctx)
		if err == nil {
			if n := cur.Read(); n > s.sent {
				s.write(Chunk{Type: e.Type, Data: e.Data}, n)
			}
			if !s.gone {
				continue
			}
			err = l.ctx.Err()
		}
		var ended *streamEnded
		switch {
		case errors.As(err, &ended):
			env := sanitize.Failure(ended.reason)
			body, _ := sanitize.Marshal(env)
			return Result{Status: StatusFailed, Envelope: env, Body: body, StatusCode: http.StatusBadGateway,
				StopReason: ended.reason, Attempt: rec.Attempts, FirstSeen: rec.CreatedAt, KeyHash: l.p.keyHash}, nil, true
		case errors.Is(err, io.EOF), errors.Is(err, live.ErrLagged), errors.Is(err, live.ErrSuperseded):
			// The stored answer of this execution ends it (and fills in
			// what a lag missed): the commit follows the end of the log at
			// once. Superseded, the row names another execution: resume
			// answers failed.
			s.complete = errors.Is(err, io.EOF) && !s.gone
			if until := l.g.now().Add(l.g.cfg.StoreTimeout); l.waitUntil.Before(until) {
				l.waitUntil = until
			}
			return Result{}, errAgain, true
		default: // the caller hung up, or the Guard is closing
			return l.g.inProgress(l.p, rec), nil, true
		}
	}
}

// resume answers a follower that has written part of the stream it
// followed and re-reads the row for the rest: the stored answer of that
// attempt completes it. Its caller has part of a stream, so this call never
// claims the key itself: any other state (a failure, another attempt, an
// expired row) ends the stream as failed. done is false before the call
// has written anything: the claim loop goes on as for any call.
func (s *streamCall) resume(l *claimLoop, rec store.Record) (res Result, err error, done bool) {
	if !s.begun {
		return Result{}, nil, false
	}
	sameRun := rec.Attempts == s.exec.Attempt && rec.ClaimNonce == s.exec.Nonce &&
		rec.Fingerprint == l.p.fingerprint && !rec.Expired()
	switch {
	case sameRun && rec.Status == store.RowSucceeded:
		res, err = s.replay(l.ctx, l.g, l.p, rec, l.readAt)
		return res, err, true
	case sameRun && rec.Status == store.RowStarted && !rec.Stale(l.p.settings.StaleAfter):
		res, err = l.running(rec)
		return res, err, true
	case sameRun && rec.Status == store.RowFailed:
		if st, err := decodeStored(rec); err == nil {
			res := l.g.storedFailure(l.p, rec, st.env)
			l.g.noteReplay(l.p, res, rec.Now)
			return res, nil, true
		}
	}
	return s.incomplete(l.p, rec), nil, true
}

// admitWaiter counts this call among the key's waiters in this process, once.
func (l *claimLoop) admitWaiter() error {
	if l.waiter != nil {
		return nil
	}
	t, err := l.g.hub.Admit(live.Key{Tenant: l.p.tenant, Scope: l.p.scope, KeyHash: l.p.keyHash})
	if err != nil {
		return ErrTooManyWaiters
	}
	l.waiter = t
	return nil
}

func (l *claimLoop) releaseWaiter() {
	if l.waiter != nil {
		l.waiter.Release()
	}
}

// parseWire reads a stored sequence back into events: blocks separated by a
// blank line, each with optional "event: " and one or more "data: " lines.
func parseWire(b []byte) ([]Chunk, error) {
	var out []Chunk
	for len(b) > 0 {
		i := bytes.Index(b, []byte("\n\n"))
		if i < 0 {
			return nil, errors.New("stored event sequence is truncated")
		}
		var e Chunk
		var data []string
		for _, line := range strings.Split(string(b[:i]), "\n") {
			switch {
			case strings.HasPrefix(line, "event: "):
				e.Type = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = append(data, strings.TrimPrefix(line, "data: "))
			case strings.HasPrefix(line, "id: "):
			default:
				return nil, fmt.Errorf("stored event sequence has a malformed line")
			}
		}
		e.Data = []byte(strings.Join(data, "\n"))
		out = append(out, e)
		b = b[i+2:]
	}
	return out, nil
}

// streamEventsState is KeyInfo.StreamEvents of a completed row.
func streamEventsState(rec store.Record) string {
	switch {
	case rec.Events == nil:
		return ""
	case len(rec.Events) == 0:
		return "dropped"
	}
	return "stored"
}
