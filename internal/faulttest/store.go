package faulttest

import (
	"context"
	"sync"
	"time"

	"github.com/idemguard/idemguard/store"
)

// Op names a Store method.
type Op string

// The Store methods a fault can target.
const (
	OpClaim     Op = "claim"
	OpGet       Op = "get"
	OpReclaim   Op = "reclaim"
	OpAbandon   Op = "abandon"
	OpHeartbeat Op = "heartbeat"
	OpComplete  Op = "complete"
	OpRelease   Op = "release"
)

// Fault is one injected failure of a Store method.
type Fault struct {
	// Before, if set, runs first (to block, or to cancel the caller).
	Before func(ctx context.Context)
	// After, if set, runs after the real statement and before its answer
	// is returned (a slow reply).
	After func(ctx context.Context)
	// Apply runs the real statement (detached from the caller's context)
	// before Err is returned: the write happened, its reply was lost.
	// Without Apply the statement never runs (a deadlock victim's
	// statement is rolled back).
	Apply bool
	// Err is returned instead of the store's answer; nil returns the
	// store's own answer (a Before-only fault).
	Err error
	// Times is how many calls the fault hits: 0 means once, negative
	// means until Clear.
	Times int
}

// Store wraps an store.Store and injects faults. It is safe for concurrent use.
type Store struct {
	store.Store
	mu     sync.Mutex
	faults map[Op]*Fault
	calls  map[Op]int
}

var _ store.Store = (*Store)(nil)

// NewStore wraps s.
func NewStore(s store.Store) *Store {
	return &Store{Store: s, faults: map[Op]*Fault{}, calls: map[Op]int{}}
}

// Inject arms f for op, replacing any fault armed for it.
func (s *Store) Inject(op Op, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Times == 0 {
		f.Times = 1
	}
	s.faults[op] = &f
}

// Clear disarms op's fault.
func (s *Store) Clear(op Op) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.faults, op)
}

// Calls is how many times op was called.
func (s *Store) Calls(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[op]
}

func (s *Store) take(op Op) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[op]++
	f := s.faults[op]
	if f == nil {
		return nil
	}
	if f.Times > 0 {
		f.Times--
		if f.Times == 0 {
			delete(s.faults, op)
		}
	}
	return f
}

// run applies f around do, which runs the real statement.
func run[T any](ctx context.Context, f *Fault, do func(context.Context) (T, error)) (T, error) {
	if f == nil {
		return do(ctx)
	}
	if f.Before != nil {
		f.Before(ctx)
	}
	if f.Err == nil {
		v, err := do(ctx)
		if f.After != nil {
			f.After(ctx)
		}
		return v, err
	}
	var zero T
	if f.Apply {
		_, _ = do(context.WithoutCancel(ctx))
	}
	return zero, f.Err
}

// Claim implements store.Store.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (uint64, error) {
	return run(ctx, s.take(OpClaim), func(ctx context.Context) (uint64, error) { return s.Store.Claim(ctx, p) })
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, tenant, scope, keyHash string) (store.Record, error) {
	return run(ctx, s.take(OpGet), func(ctx context.Context) (store.Record, error) {
		return s.Store.Get(ctx, tenant, scope, keyHash)
	})
}

// Reclaim implements store.Store.
func (s *Store) Reclaim(ctx context.Context, p store.ReclaimParams) (bool, error) {
	return run(ctx, s.take(OpReclaim), func(ctx context.Context) (bool, error) { return s.Store.Reclaim(ctx, p) })
}

// Abandon implements store.Store.
func (s *Store) Abandon(ctx context.Context, p store.AbandonParams) (bool, error) {
	return run(ctx, s.take(OpAbandon), func(ctx context.Context) (bool, error) { return s.Store.Abandon(ctx, p) })
}

// Heartbeat implements store.Store.
func (s *Store) Heartbeat(ctx context.Context, id uint64, nonce string) (bool, error) {
	return run(ctx, s.take(OpHeartbeat), func(ctx context.Context) (bool, error) { return s.Store.Heartbeat(ctx, id, nonce) })
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, p store.CompleteParams) (bool, time.Time, error) {
	type answer struct {
		ok bool
		at time.Time
	}
	a, err := run(ctx, s.take(OpComplete), func(ctx context.Context) (answer, error) {
		ok, at, err := s.Store.Complete(ctx, p)
		return answer{ok, at}, err
	})
	return a.ok, a.at, err
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, p store.ReleaseParams) (bool, error) {
	return run(ctx, s.take(OpRelease), func(ctx context.Context) (bool, error) { return s.Store.Release(ctx, p) })
}

// Renew implements store.Store. It is the running execution's
// heartbeat, so faults injected for OpHeartbeat apply to it.
func (s *Store) Renew(ctx context.Context, p store.RenewParams) (store.RenewResult, error) {
	return run(ctx, s.take(OpHeartbeat), func(ctx context.Context) (store.RenewResult, error) { return s.Store.Renew(ctx, p) })
}
