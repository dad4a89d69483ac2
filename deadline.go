package idemguard

import (
	"context"
	"sync/atomic"
	"time"
)

// A store write's context
//
// Every write runs detached from its caller's cancellation and bounded by
// StoreTimeout (storeCtx's comment). context.WithTimeout over
// context.WithoutCancel gives each write a context, a timer and its
// callback of its own: four allocations and a timer added to and removed
// from the runtime's heap, about a tenth of a fresh key's CPU in the engine
// (BENCHMARKS.md). writeCtx gives the same bound with one small allocation:
// the writes sent within the same shareWindow share one deadline context,
// made by the first of them and cancelled by its own timer when the
// deadline passes. A write's deadline is thus StoreTimeout after the start
// of its window: never later than StoreTimeout after it was sent, and at
// most shareWindow (a hundredth of StoreTimeout, at most 50ms) earlier.
//
// Every statement on a write's context registers with the window's context
// while it runs (internal/mysqlconn's interruption: context.AfterFunc), in
// a children map that each window makes anew and grows as the statements
// in flight at once come and go. With 10ms windows that growth was about
// 4% of a fresh key's client CPU on MariaDB (BenchmarkFreshMySQLAudited's
// profile: mysqlconn's arm and release 7% of samples, 3% with 50ms
// windows, against 2% for the raw floor, whose statements all register
// with one long-lived context).

// maxShareWindow bounds how long writes keep sharing one deadline.
const maxShareWindow = 50 * time.Millisecond

// sharedDeadline is the deadline context the writes of the current window
// share. Its zero value is ready.
type sharedDeadline struct {
	cur atomic.Pointer[deadlineWindow]
}

// deadlineWindow is one window's deadline context.
type deadlineWindow struct {
	ctx    context.Context
	cancel context.CancelFunc // never called: the deadline ends it
	ends   time.Time          // when writes stop joining it
}

// get returns a context that ends timeout after the current window began.
func (s *sharedDeadline) get(timeout time.Duration) context.Context {
	now := time.Now()
	if w := s.cur.Load(); w != nil && now.Before(w.ends) {
		return w.ctx
	}
	w := &deadlineWindow{ends: now.Add(min(timeout/100, maxShareWindow))}
	w.ctx, w.cancel = context.WithDeadline(context.Background(), now.Add(timeout))
	s.cur.Store(w) // a concurrent window replaced here only made its own timer
	return w.ctx
}

// writeCtx is the context of a store write on behalf of ctx: ctx's values
// without its cancellation, bounded by StoreTimeout. The cancel it returns
// does nothing (the shared deadline ends the context); callers defer it as
// they do storeCtx's.
func (g *Guard) writeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return detachedCtx{Context: g.deadline.get(g.cfg.StoreTimeout), values: ctx}, noCancel
}

func noCancel() {}

// detachedCtx has the deadline, Done and Err of its shared deadline context
// and the values of the caller's context.
type detachedCtx struct {
	context.Context // the shared deadline
	values          context.Context
}

// Value answers from the deadline context first: it knows only its own
// cancellation (what context.Cause and a child context look up), and
// answers nil for every other key, which the caller's context then answers.
func (c detachedCtx) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.values.Value(key)
}
