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
type heartbeat struct {
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	lost bool
}

func (g *Guard) startHeartbeat(p prepared, o owned, cancel context.CancelCauseFunc) *heartbeat {
	hb := &heartbeat{done: make(chan struct{})}
	every := cmp.Or(g.cfg.HeartbeatEvery, p.settings.StaleAfter/3)
	hb.wg.Add(1)
	go func() {
		defer hb.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		lastOK := time.Now()
		for {
			select {
			case <-hb.done:
				return
			case <-t.C:
			}
			ctx, c := context.WithTimeout(context.Background(), min(g.cfg.StoreTimeout, every))
			ok, err := g.store.Heartbeat(ctx, o.id, o.nonce)
			c()
			switch {
			case err == nil && ok:
				lastOK = time.Now()
				continue
			case err != nil && time.Since(lastOK) < p.settings.StaleAfter:
				g.emit(Event{Kind: EventStoreError, Scope: p.scope, StoreOp: "heartbeat"})
				g.log.Warn("guard: heartbeat failed; retrying", g.attrs(p, slog.Any("err", err))...)
				continue
			}
			hb.mu.Lock()
			hb.lost = true
			hb.mu.Unlock()
			cancel(ErrOwnershipLost)
			g.log.Warn("guard: claim lost; cancelling the operation", g.attrs(p, slog.Int("attempt", o.attempt),
				slog.Bool("store_unreachable", err != nil))...)
			return
		}
	}()
	return hb
}

// stop ends the heartbeat and reports whether the claim was lost.
func (hb *heartbeat) stop() bool {
	close(hb.done)
	hb.wg.Wait()
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.lost
}
