package engine

import (
	"cmp"
	"context"
	"log/slog"
	"sync"
	"time"
)

// heartbeat renews a claim every StaleAfter/3 while the operation runs. When
// the renewal changes no row the claim was taken over: the operation's
// context is cancelled with ErrOwnershipLost. When the store cannot be
// reached for a whole StaleAfter, another caller may already have taken the
// row over, so the operation is cancelled the same way.
//
// It runs on a timer (time.AfterFunc), not on a goroutine of its own: most
// operations finish long before the first beat is due, and then the
// heartbeat costs one timer instead of a goroutine start, a ticker and a
// wake-up of another thread (measured with internal/bench).
type heartbeat struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	lost    bool
	beating sync.WaitGroup // a beat in progress; stop waits for it
}

func (g *Guard) startHeartbeat(p prepared, o owned, cancel context.CancelCauseFunc) *heartbeat {
	hb := &heartbeat{}
	every := cmp.Or(g.cfg.HeartbeatEvery, p.settings.StaleAfter/3)
	lastOK := time.Now() // only the beat, which never runs twice at once, touches it
	var beat func()
	beat = func() {
		hb.mu.Lock()
		if hb.stopped {
			hb.mu.Unlock()
			return
		}
		hb.beating.Add(1) // under mu, before stop can Wait
		hb.mu.Unlock()
		defer hb.beating.Done()

		began := time.Now()
		ctx, c := context.WithTimeout(context.Background(), min(g.cfg.StoreTimeout, every))
		ok, err := g.store.Heartbeat(ctx, o.id, o.nonce)
		c()
		switch {
		case err == nil && ok:
			lastOK = time.Now()
			hb.next(every - time.Since(began))
			return
		case err != nil && time.Since(lastOK) < p.settings.StaleAfter:
			g.emit(Event{Kind: EventStoreError, Scope: p.scope, StoreOp: "heartbeat"})
			g.log.Warn("guard: heartbeat failed; retrying", g.attrs(p, slog.Any("err", err))...)
			hb.next(every - time.Since(began))
			return
		}
		hb.mu.Lock()
		hb.lost = true
		hb.mu.Unlock()
		cancel(ErrOwnershipLost)
		g.log.Warn("guard: claim lost; cancelling the operation", g.attrs(p, slog.Int("attempt", o.attempt),
			slog.Bool("store_unreachable", err != nil))...)
	}
	hb.mu.Lock()
	hb.timer = time.AfterFunc(every, beat)
	hb.mu.Unlock()
	return hb
}

// next schedules the following beat after d (at once when d <= 0, like a
// ticker whose tick came due during a slow renewal), unless stopped.
func (hb *heartbeat) next(d time.Duration) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if !hb.stopped {
		hb.timer.Reset(max(d, 0))
	}
}

// stop ends the heartbeat, waits for a renewal in progress, and reports
// whether the claim was lost.
func (hb *heartbeat) stop() bool {
	hb.mu.Lock()
	hb.stopped = true
	hb.timer.Stop()
	hb.mu.Unlock()
	hb.beating.Wait()
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.lost
}
