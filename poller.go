package idemguard

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemguard/idemguard/internal/live"
	"github.com/idemguard/idemguard/store"
)

// One poller per watched key
//
// Every Watcher of a key in this process follows one rowPoller: it reads
// the key's row with a bounded backoff (at most a quarter of the lease, at
// most a second), at once when the key's execution here beats or ends
// (jobState.notify and end nudge it), and publishes each read to all of
// them. A hundred watchers of one key thus cost one watcher's reads. The
// backoff starts again when the row's status or attempt changes, not on a
// heartbeat. The poller stops with its last watcher.
type rowPoller struct {
	k        live.Key
	fallback time.Duration
	refs     int // under rowPollers.mu
	stop     context.CancelFunc
	wake     chan struct{} // a nudge: read now

	mu      sync.Mutex
	rec     store.Record
	err     error
	seq     uint64        // reads published
	changed chan struct{} // closed at the next publication
}

// rowPollers are the pollers of the keys watched in this process.
type rowPollers struct {
	mu sync.Mutex
	m  map[live.Key]*rowPoller
}

// follow returns the poller of k, started if it was not, and the sequence
// number of its last read; unfollow gives it back.
func (g *Guard) follow(k live.Key, fallback time.Duration, rec store.Record) (*rowPoller, uint64) {
	ps := &g.jobs.pollers
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p := ps.m[k]; p != nil {
		p.refs++
		p.mu.Lock()
		defer p.mu.Unlock()
		return p, p.seq
	}
	ctx, stop := context.WithCancel(g.lifetime)
	p := &rowPoller{k: k, fallback: fallback, refs: 1, stop: stop, wake: make(chan struct{}, 1), changed: make(chan struct{})}
	if ps.m == nil {
		ps.m = map[live.Key]*rowPoller{}
	}
	ps.m[k] = p
	go p.run(ctx, g, rec.LeaseOr(fallback), rec)
	return p, 0
}

func (g *Guard) unfollow(p *rowPoller) {
	ps := &g.jobs.pollers
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p.refs--; p.refs == 0 {
		delete(ps.m, p.k)
		p.stop()
	}
}

// nudge asks k's poller, if k is watched here, to read the row now.
func (ps *rowPollers) nudge(k live.Key) {
	ps.mu.Lock()
	p := ps.m[k]
	ps.mu.Unlock()
	if p != nil {
		select {
		case p.wake <- struct{}{}:
		default: // a read is due already
		}
	}
}

func (p *rowPoller) run(ctx context.Context, g *Guard, lease time.Duration, last store.Record) {
	poll := newBackoff(lease)
	timer := time.NewTimer(poll.next())
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-timer.C:
		}
		rec, err := g.readWatched(ctx, p.k, p.fallback)
		if ctx.Err() != nil {
			return
		}
		p.publish(rec, err)
		if err == nil && (rec.Status != last.Status || rec.Attempts != last.Attempts) {
			poll = newBackoff(rec.LeaseOr(p.fallback))
		}
		if err == nil {
			last = rec
		}
		timer.Reset(poll.next())
	}
}

func (p *rowPoller) publish(rec store.Record, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rec, p.err = rec, err
	p.seq++
	close(p.changed)
	p.changed = make(chan struct{})
}

// next waits for a read published after seen; ok false when ctx ended
// first.
func (p *rowPoller) next(ctx context.Context, seen uint64) (rec store.Record, err error, seq uint64, ok bool) {
	for {
		p.mu.Lock()
		if p.seq > seen {
			defer p.mu.Unlock()
			return p.rec, p.err, p.seq, true
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return store.Record{}, nil, seen, false
		case <-ch:
		}
	}
}

// readWatched reads the row of k; an expired one is absent.
func (g *Guard) readWatched(ctx context.Context, k live.Key, fallback time.Duration) (store.Record, error) {
	sctx, cancel := g.storeCtx(ctx)
	defer cancel()
	rec, err := g.store.Get(sctx, k.Tenant, k.Scope, k.KeyHash)
	switch {
	case errors.Is(err, ErrNotFound):
		return store.Record{}, ErrNotFound
	case err != nil:
		return store.Record{}, &StoreError{Op: "watch", Err: err}
	case rec.Reclaimable(fallback):
		return store.Record{}, ErrNotFound
	}
	return rec, nil
}
