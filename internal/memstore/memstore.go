// Package memstore is the in-memory engine.Store: the reference semantics for
// unit tests and for running idemguard without a database. It keeps state in
// one process only, so it guards nothing across replicas.
package memstore

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemguard/idemguard/internal/engine"
)

var _ engine.Store = (*Store)(nil)

// ErrClosed is returned by every method after Close.
var ErrClosed = errors.New("memstore: closed")

// Store is an in-memory engine.Store. It is safe for concurrent use.
type Store struct {
	mu     sync.Mutex
	now    func() time.Time
	nextID uint64
	rows   map[key]*engine.Record
	ids    map[uint64]*engine.Record
	closed bool
}

type key struct{ tenant, scope, keyHash string }

// Option configures a Store.
type Option func(*Store)

// WithClock sets the store's clock (the stand-in for the database clock).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{now: time.Now, rows: make(map[key]*engine.Record), ids: make(map[uint64]*engine.Record)}
	for _, o := range opts {
		o(s)
	}
	return s
}

func (s *Store) clock() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// lock takes the mutex unless the store is closed or ctx is done, mirroring
// a database that cannot be reached.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// Close makes every later call fail, like a database that went away.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// Claim implements engine.Store.
func (s *Store) Claim(ctx context.Context, p engine.ClaimParams) (uint64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	k := key{p.Tenant, p.Scope, p.KeyHash}
	if _, ok := s.rows[k]; ok {
		return 0, engine.ErrDuplicate
	}
	now := s.clock()
	s.nextID++
	r := &engine.Record{ID: s.nextID, Tenant: p.Tenant, Scope: p.Scope, KeyHash: p.KeyHash,
		Fingerprint: p.Fingerprint, Status: engine.RowStarted, Attempts: 1, ClaimNonce: p.Nonce,
		CreatedAt: now, StartedAt: now, HeartbeatAt: now, ExpiresAt: now.Add(p.TTL), Lease: p.Lease}
	s.rows[k], s.ids[r.ID] = r, r
	return r.ID, nil
}

// Get implements engine.Store.
func (s *Store) Get(ctx context.Context, tenant, scope, keyHash string) (engine.Record, error) {
	if err := s.lock(ctx); err != nil {
		return engine.Record{}, err
	}
	defer s.mu.Unlock()
	r, ok := s.rows[key{tenant, scope, keyHash}]
	if !ok {
		return engine.Record{}, engine.ErrNotFound
	}
	out := *r
	out.Response = bytes.Clone(r.Response)
	out.Now = s.clock()
	return out, nil
}

func (s *Store) byID(id uint64) *engine.Record { return s.ids[id] }

// Reclaim implements engine.Store.
func (s *Store) Reclaim(ctx context.Context, p engine.ReclaimParams) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.byID(p.ID)
	if r == nil || r.ClaimNonce != p.OldNonce || r.Attempts != p.OldAttempts {
		return false, nil
	}
	now := s.clock()
	stale := stale(r, now, p.StaleAfter)
	switch p.Kind {
	case engine.ReclaimExpired:
		if !r.ExpiresAt.Before(now) || (r.Status == engine.RowStarted && !stale) {
			return false, nil
		}
		*r = engine.Record{ID: r.ID, Tenant: r.Tenant, Scope: r.Scope, KeyHash: r.KeyHash,
			Fingerprint: p.Fingerprint, Status: engine.RowStarted, Attempts: 1,
			CreatedAt: now, StartedAt: now, HeartbeatAt: now, ExpiresAt: now.Add(p.TTL), Lease: p.Lease}
	case engine.ReclaimStale:
		if !stale {
			return false, nil
		}
		r.Attempts++
		r.StartedAt, r.HeartbeatAt, r.Lease = now, now, p.Lease
	case engine.ReclaimFailed:
		if r.Status != engine.RowFailed || r.Attempts >= p.MaxAttempts || r.ExpiresAt.Before(now) {
			return false, nil
		}
		r.Status = engine.RowStarted
		r.Attempts++
		r.Response, r.ResponseCode, r.CompletedAt = nil, 0, time.Time{}
		r.StartedAt, r.HeartbeatAt, r.Lease = now, now, p.Lease
		r.ExpiresAt = later(r.ExpiresAt, now.Add(p.TTL))
	default:
		return false, errors.New("memstore: unknown reclaim kind")
	}
	r.ClaimNonce = p.NewNonce
	return true, nil
}

// Abandon implements engine.Store.
func (s *Store) Abandon(ctx context.Context, p engine.AbandonParams) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.byID(p.ID)
	now := s.clock()
	if r == nil || r.ClaimNonce != p.OldNonce || r.Attempts != p.OldAttempts || !stale(r, now, p.StaleAfter) {
		return false, nil
	}
	r.Status = engine.RowFailed
	r.Response, r.ResponseCode = bytes.Clone(p.Response), p.ResponseCode
	r.CompletedAt, r.ExpiresAt = now, now.Add(p.TTL)
	return true, nil
}

// Heartbeat implements engine.Store.
func (s *Store) Heartbeat(ctx context.Context, id uint64, nonce string) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.byID(id)
	if r == nil || r.Status != engine.RowStarted || r.ClaimNonce != nonce {
		return false, nil
	}
	r.HeartbeatAt = s.clock()
	return true, nil
}

// Complete implements engine.Store.
func (s *Store) Complete(ctx context.Context, p engine.CompleteParams) (bool, time.Time, error) {
	if err := s.lock(ctx); err != nil {
		return false, time.Time{}, err
	}
	defer s.mu.Unlock()
	r := s.byID(p.ID)
	if r == nil || r.Status != engine.RowStarted || r.ClaimNonce != p.Nonce {
		return false, time.Time{}, nil
	}
	now := s.clock()
	r.Status = p.Status
	r.Response, r.ResponseCode = bytes.Clone(p.Response), p.ResponseCode
	r.CompletedAt, r.ExpiresAt = now, now.Add(p.TTL)
	return true, now, nil
}

// Release implements engine.Store.
func (s *Store) Release(ctx context.Context, p engine.ReleaseParams) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.byID(p.ID)
	if r == nil || r.Status != engine.RowStarted || r.ClaimNonce != p.Nonce {
		return false, nil
	}
	if p.Prev == nil {
		delete(s.rows, key{r.Tenant, r.Scope, r.KeyHash})
		delete(s.ids, r.ID)
		return true, nil
	}
	prev := *p.Prev
	r.Status, r.ClaimNonce, r.Attempts = prev.Status, prev.ClaimNonce, prev.Attempts
	r.Response, r.ResponseCode = bytes.Clone(prev.Response), prev.ResponseCode
	r.StartedAt, r.HeartbeatAt, r.CompletedAt = prev.StartedAt, prev.HeartbeatAt, prev.CompletedAt
	r.ExpiresAt, r.Lease = prev.ExpiresAt, prev.Lease
	return true, nil
}

// stale reports whether r is a started row whose heartbeat is older than its
// lease (fallback for a row without one) at now.
func stale(r *engine.Record, now time.Time, fallback time.Duration) bool {
	return r.Status == engine.RowStarted && r.HeartbeatAt.Before(now.Add(-r.LeaseOr(fallback)))
}

// Ping implements engine.Store.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	s.mu.Unlock()
	return nil
}

// Age moves every time of the row back by d, as if d had passed for it alone.
// For tests.
func (s *Store) Age(tenant, scope, keyHash string, d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[key{tenant, scope, keyHash}]
	if !ok {
		return false
	}
	for _, t := range []*time.Time{&r.CreatedAt, &r.StartedAt, &r.HeartbeatAt, &r.CompletedAt, &r.ExpiresAt} {
		if !t.IsZero() {
			*t = t.Add(-d)
		}
	}
	return true
}

// Rows returns a copy of every row. For tests.
func (s *Store) Rows() []engine.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]engine.Record, 0, len(s.rows))
	for _, r := range s.rows {
		c := *r
		c.Response = bytes.Clone(r.Response)
		out = append(out, c)
	}
	return out
}

// DeleteExpired removes rows whose expires_at has passed, except started
// rows whose heartbeat is younger than staleAfter, and returns how many it
// removed. It is the in-memory counterpart of the cleanup job.
func (s *Store) DeleteExpired(staleAfter time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	n := 0
	for k, r := range s.rows {
		live := r.Status == engine.RowStarted && !stale(r, now, staleAfter)
		if r.ExpiresAt.Before(now) && !live {
			delete(s.rows, k)
			delete(s.ids, r.ID)
			n++
		}
	}
	return n
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
