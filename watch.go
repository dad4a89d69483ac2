package idemguard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemguard/idemguard/internal/live"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/tenancy"
)

// EventID identifies a Watch event of one key (Event.ID); Watch resumes
// after it. It is its own type so that it cannot be passed where a key is
// expected.
type EventID string

// rank orders the Watch events of one attempt that carry the same time;
// -1 for a kind Watch does not report.
func (k EventKind) rank() int {
	switch k {
	case EventStarted:
		return 0
	case EventAlive:
		return 1
	case EventProgress:
		return 2
	case EventCancelRequested:
		return 3
	case EventStale:
		return 4
	case EventSucceeded, EventFailed, EventCanceled:
		return rankFinal
	}
	return -1
}

// rankFinal is the rank of the events that end a run.
const rankFinal = 5

type eventPos struct {
	attempt int
	micros  int64
	rank    int
}

func (a eventPos) after(b eventPos) bool {
	if a.attempt != b.attempt {
		return a.attempt > b.attempt
	}
	if a.micros != b.micros {
		return a.micros > b.micros
	}
	return a.rank > b.rank
}

func (e Event) pos() eventPos {
	return eventPos{attempt: e.Attempt, micros: e.At.UnixMicro(), rank: e.Kind.rank()}
}

// parseEventID reads an ID that Watch gave out; false for anything else.
func parseEventID(id string) (eventPos, bool) {
	parts := strings.Split(id, ".")
	if len(parts) != 3 {
		return eventPos{}, false
	}
	attempt, err1 := strconv.Atoi(parts[0])
	micros, err2 := strconv.ParseInt(parts[2], 10, 64)
	rank := EventKind(parts[1]).rank()
	if err1 != nil || err2 != nil || rank < 0 || attempt < 0 {
		return eventPos{}, false
	}
	return eventPos{attempt: attempt, micros: micros, rank: rank}, true
}

// Watcher reports the transitions of one key (Guard.Watch). It is used by
// one goroutine at a time; Close it when done.
type Watcher struct {
	g        *Guard
	k        live.Key
	fallback time.Duration

	last    eventPos
	hasLast bool
	pending []Event
	done    bool

	ticket *live.Ticket
	poller *rowPoller // the key's one poller in this process (poller.go)
	seen   uint64     // the poller's reads this watcher has taken
}

// Watch follows key: Next reports each
// transition in order — started (with the attempt), alive (each heartbeat),
// progress (each change the operation reported, as a heartbeat stored it:
// Info.Progress), cancel_requested, stale — and finally succeeded, failed or canceled with
// the stored answer, then io.EOF. The store is the authority, so a Watch in
// any process follows a key running in any other: the row is read again
// and again with a bounded backoff (at most a quarter of the lease, at most
// a second), and, when the key runs in this process, at once on each of its
// heartbeats. The watchers of one key in this process share those reads:
// however many they are, they cost one watcher's. after is the ID of the last event the caller has seen
// (a reconnecting EventSource's Last-Event-ID): only later ones are
// reported; "" or an ID Watch did not give out reports from the key's
// current state.
//
// It returns ErrNotFound for an absent or expired key (or another
// tenant's), ErrTooManyWatchers over the bounds of this process, and a
// *StoreError when the store cannot be read.
func (g *Guard) Watch(ctx context.Context, key Key, after EventID) (*Watcher, error) {
	if err := key.check(); err != nil {
		return nil, err
	}
	w := &Watcher{g: g, k: keyOfHash(key.tenant, key.scope, key.hash), fallback: cmp.Or(g.cfg.Defaults.StaleAfter, DefaultStaleAfter)}
	w.last, w.hasLast = parseEventID(string(after))
	rec, err := w.read(ctx)
	if err != nil {
		return nil, err
	}
	t, err := g.jobs.hub.Admit(w.k)
	if err != nil {
		return nil, ErrTooManyWatchers
	}
	w.ticket = t
	w.poller, w.seen = g.follow(w.k, w.fallback, rec)
	w.take(rec)
	return w, nil
}

func keyOfHash(tenant tenancy.ID, scope, keyHash string) live.Key {
	return live.Key{Tenant: string(tenant), Scope: scope, KeyHash: keyHash}
}

// read reads the key's row; an expired one is absent.
func (w *Watcher) read(ctx context.Context) (store.Record, error) {
	return w.g.readWatched(ctx, w.k, w.fallback)
}

// take queues the events of rec that come after the last one reported, and
// reports whether there were any.
func (w *Watcher) take(rec store.Record) bool {
	evs := eventsOf(w.k.KeyHash, rec, w.fallback)
	n := len(w.pending)
	for _, e := range evs {
		if p := e.pos(); !w.hasLast || p.after(w.last) {
			w.pending = append(w.pending, e)
			w.last, w.hasLast = p, true
		}
	}
	if len(evs) == 0 || !evs[len(evs)-1].Final() {
		return len(w.pending) > n
	}
	if end := evs[len(evs)-1]; end.pos() != w.last {
		// The row went back to an earlier end: a claim whose start the
		// caller saw was given back (nothing ran under it). That end is
		// the key's outcome; the caller gets it, though it sorts before
		// what it saw.
		w.pending = append(w.pending, end)
		w.last = end.pos()
	}
	if len(w.pending) == 0 {
		w.done = true // the caller has seen the end already
	}
	return len(w.pending) > n
}

// eventsOf is the transitions a row shows, in order: the current attempt's
// start, its latest heartbeat, cancel request and staleness, or its end.
func eventsOf(keyHash string, rec store.Record, fallback time.Duration) []Event {
	info, err := keyInfoOf(keyHash, rec, fallback)
	if err != nil {
		return nil
	}
	attempt := rec.Attempts
	var end EventKind
	switch rec.Status {
	case store.RowSucceeded:
		end = EventSucceeded
	case store.RowFailed:
		end = EventFailed
		if info.Envelope != nil && info.Envelope.StopReason == sanitize.Canceled {
			// A canceled execution gave its attempt back.
			end, attempt = EventCanceled, attempt+1
		}
	}
	ev := func(kind EventKind, at time.Time) Event {
		at = at.UTC().Truncate(time.Microsecond)
		return Event{ID: EventID(fmt.Sprintf("%d.%s.%d", attempt, kind, at.UnixMicro())), Kind: kind, Attempt: attempt, At: at, Info: &info}
	}
	evs := []Event{ev(EventStarted, rec.StartedAt)}
	if end != "" {
		return append(evs, ev(end, rec.CompletedAt))
	}
	if rec.HeartbeatAt.After(rec.StartedAt) {
		evs = append(evs, ev(EventAlive, rec.HeartbeatAt))
	}
	if !rec.Progress.At.IsZero() {
		evs = append(evs, ev(EventProgress, rec.Progress.At))
	}
	if !rec.CancelRequestedAt.IsZero() {
		evs = append(evs, ev(EventCancelRequested, rec.CancelRequestedAt))
	}
	if info.Stale {
		evs = append(evs, ev(EventStale, rec.LastBeat().Add(rec.LeaseOr(fallback))))
	}
	slices.SortStableFunc(evs, func(a, b Event) int {
		switch {
		case a.pos().after(b.pos()):
			return 1
		case b.pos().after(a.pos()):
			return -1
		}
		return 0
	})
	return evs
}

// Next returns the key's next transition, waiting for it. After the final
// event (Event.Final) it returns io.EOF; ErrNotFound when the row went
// away meanwhile (it expired, or a claim was given back); ctx's error when
// ctx ends first; ErrShuttingDown once the Guard is shutting down
// (WaitJobs or Close). A store that cannot be read is read again, with the
// same backoff, until ctx ends.
func (w *Watcher) Next(ctx context.Context) (Event, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	for _, end := range []context.Context{w.g.jobs.stopping, w.g.lifetime} {
		stop := context.AfterFunc(end, func() { cancel(ErrShuttingDown) })
		defer stop()
	}
	for {
		if len(w.pending) > 0 {
			e := w.pending[0]
			w.pending = w.pending[1:]
			if e.Final() {
				w.done = true
			}
			return e, nil
		}
		if w.done {
			return Event{}, io.EOF
		}
		rec, err, seen, ok := w.poller.next(ctx, w.seen)
		if !ok {
			if cause := context.Cause(ctx); errors.Is(cause, ErrShuttingDown) {
				return Event{}, cause
			}
			return Event{}, ctx.Err()
		}
		w.seen = seen
		switch {
		case errors.Is(err, ErrNotFound):
			w.done = true
			return Event{}, ErrNotFound
		case err != nil:
			continue // the poller reads again, with its backoff
		}
		w.take(rec)
	}
}

// Close gives the watcher's place back.
func (w *Watcher) Close() {
	if w.poller != nil {
		w.g.unfollow(w.poller)
		w.poller = nil
	}
	if w.ticket != nil {
		w.ticket.Release()
		w.ticket = nil
	}
}
