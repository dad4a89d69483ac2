package idemguard

import (
	"context"
	"time"

	"github.com/idemguard/idemguard/store"
)

// One call path
//
// Do, Start and DoStream are one path (Guard.call): enter, prepare, the
// replay cache, the read before the claim, the claim loop. What differs
// between them is how the answer reaches the caller, the delivery, and the
// path asks the call's delivery at the few points where that matters:
//
//   - replay: answer a succeeded row (a stream sends the stored chunks);
//   - resume: a call that has delivered part of an answer reads the row
//     again (a stream follower finishing the stream it followed);
//   - attach: a live duplicate within Call.Wait (a stream follows the
//     running execution in this process);
//   - run: run the operation under the claim this call won (Start hands it
//     to a goroutine and answers Accepted);
//   - beat: each renewal of that claim's lease (Start wakes the key's
//     watchers in this process);
//   - events: what the commit stores beside the envelope (a stream's
//     chunks, in their wire form);
//   - end: the answer the path found, as the caller gets it (a stream
//     renders an answer it has not delivered as chunks).
//
// Everything else, including the Event and the audit record of a replay
// (Guard.replayed), is the path's own and the same for every delivery. A
// new delivery (another wire protocol, a forced run) is one more
// implementation; plain is the base the others embed.
type delivery interface {
	// setup fits the prepared call to the delivery before anything is
	// read: Start runs detached and never waits; DoStream binds its call.
	// It takes and returns p by value: a pointer would move every call's
	// prepared to the heap (the method is dynamic).
	setup(p prepared) prepared
	replay(ctx context.Context, g *Guard, p prepared, rec store.Record, readAt time.Time) (Result, error)
	// resume and attach answer (done true) or leave the row to the claim
	// loop (done false).
	resume(l *claimLoop, rec store.Record) (res Result, err error, done bool)
	attach(l *claimLoop, rec store.Record) (res Result, err error, done bool)
	run(ctx context.Context, g *Guard, p prepared, o owned) (Result, error)
	beat(g *Guard, p prepared)
	events(status store.RowStatus) []byte
	end(res Result, err error) (Result, error)
}

// plain is Do's delivery: the Result is the answer.
type plain struct{ op Operation }

func (plain) setup(p prepared) prepared { return p }

func (plain) replay(ctx context.Context, g *Guard, p prepared, rec store.Record, readAt time.Time) (Result, error) {
	res, err := g.replay(ctx, p, rec, readAt)
	if err != nil {
		return Result{}, err
	}
	g.replayed(p, res, rec.Now, false)
	return res, nil
}

func (plain) resume(*claimLoop, store.Record) (Result, error, bool) { return Result{}, nil, false }
func (plain) attach(*claimLoop, store.Record) (Result, error, bool) { return Result{}, nil, false }

func (d plain) run(ctx context.Context, g *Guard, p prepared, o owned) (Result, error) {
	return g.runOwned(ctx, p, d.op, o)
}

func (plain) beat(*Guard, prepared)                     {}
func (plain) events(store.RowStatus) []byte             { return nil }
func (plain) end(res Result, err error) (Result, error) { return res, err }

// background is Start's delivery: the operation runs in a goroutine of
// this process, and the caller is answered Accepted once the claim is won.
type background struct{ plain }

// setup: the operation outlives the request, and a duplicate is answered at
// once (Call.Wait is ignored, Call.Detach implied). The read before the
// claim is the plain call's alone, as it always was.
func (background) setup(p prepared) prepared {
	p.detach, p.wait, p.noReadFirst = true, 0, true
	return p
}

func (d background) run(ctx context.Context, g *Guard, p prepared, o owned) (Result, error) {
	return g.runInBackground(ctx, p, d.op, o)
}

func (background) beat(g *Guard, p prepared) { g.jobs.notify(keyOf(p), string(EventAlive)) }

// call is Do, Start and DoStream after their arguments were checked: the
// one call path, with d delivering the answer.
func (g *Guard) call(ctx context.Context, c Call, d delivery) (Result, error) {
	if !g.enter() {
		// Claiming now would only record a failed attempt: the operation
		// would be cut off at once. The caller retries, on another replica.
		return Result{}, &StoreError{Op: "claim", Err: ErrShuttingDown}
	}
	defer g.inflight.Done()
	p, err := g.prepare(ctx, c)
	if err != nil {
		return Result{}, err
	}
	p.delivery = d
	p = d.setup(p)
	if res, err, ok := g.fromCache(p); ok {
		return res, err
	}
	return d.end(g.readFirstOrExecute(ctx, p))
}

// fromCache answers the call from the replay cache, if it holds the key
// and the delivery takes an envelope (ok false: the store decides).
func (g *Guard) fromCache(p prepared) (res Result, err error, ok bool) {
	if p.noCache {
		return Result{}, nil, false
	}
	now := g.now() // the cache's clock, and the audit trail's for a decision no read preceded
	res, fp, keyHash, ok := g.cache.get(p.tenant, p.scope, p.keyHash, now)
	if !ok {
		return Result{}, nil, false
	}
	p.keyHash = keyHash // the same hash, in the entry's memory (replayCache.get)
	if fp != p.fingerprint {
		g.emit(Event{Kind: EventMismatch, Scope: p.scope})
		g.noteConflict(p, res.Attempt, time.Time{})
		return Result{}, ErrFingerprintMismatch, true
	}
	g.replayed(p, res, now, true)
	return res, nil, true
}

// replayed reports a stored success answered to p's call, whatever
// delivered it: the event books the tokens the replay saved to the call's
// tenant, and the audit trail notes it. at is the database's clock at the
// read that found the row; the service's when the replay cache answered
// (fromMemory).
func (g *Guard) replayed(p prepared, res Result, at time.Time, fromMemory bool) {
	g.emit(Event{Kind: EventReplayed, Tenant: p.tenant, Scope: p.scope, FromMemory: fromMemory, Usage: res.Usage})
	g.noteReplayAt(p, res, at, fromMemory)
}
