package idemguard

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"
)

var _ Store = (*MemoryStore)(nil)

// ErrMemoryStoreClosed is returned by every method after Close.
var ErrMemoryStoreClosed = errors.New("idemguard: memory store closed")

// MemoryStore is the in-memory Store: for tests, examples and single-process
// development. Nothing survives the process and two processes never share a
// key, so it guards nothing across replicas. It is held to the same
// conformance suite as the MySQL store and is safe for concurrent use.
type MemoryStore struct {
	mu     sync.Mutex
	now    func() time.Time
	nextID uint64
	rows   map[memKey]*Record
	ids    map[uint64]*Record
	closed bool
	// audit is the audit trail, in the order written (memstore_audit.go).
	audit    []AuditEvent
	auditIDs map[string]bool
}

type memKey struct{ tenant, scope, keyHash string }

// MemoryOption configures a MemoryStore.
type MemoryOption func(*MemoryStore)

// MemoryClock sets the store's clock (the stand-in for the database clock).
func MemoryClock(now func() time.Time) MemoryOption { return func(s *MemoryStore) { s.now = now } }

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(opts ...MemoryOption) *MemoryStore {
	s := &MemoryStore{now: time.Now, rows: make(map[memKey]*Record), ids: make(map[uint64]*Record)}
	for _, o := range opts {
		o(s)
	}
	return s
}

func (s *MemoryStore) clock() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// lock takes the mutex unless the store is closed or ctx is done, mirroring
// a database that cannot be reached.
func (s *MemoryStore) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrMemoryStoreClosed
	}
	return nil
}

// Close makes every later call fail, like a database that went away.
func (s *MemoryStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// Claim implements Store.
func (s *MemoryStore) Claim(ctx context.Context, p ClaimParams) (uint64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	k := memKey{p.Tenant, p.Scope, p.KeyHash}
	if _, ok := s.rows[k]; ok {
		return 0, ErrDuplicate
	}
	now := s.clock()
	s.nextID++
	r := &Record{ID: s.nextID, Tenant: p.Tenant, Scope: p.Scope, KeyHash: p.KeyHash,
		Fingerprint: p.Fingerprint, Status: RowStarted, Attempts: 1, ClaimNonce: p.Nonce,
		CreatedAt: now, StartedAt: now, HeartbeatAt: now, ExpiresAt: now.Add(p.TTL), Lease: p.Lease,
		SecretID: p.SecretID}
	s.rows[k], s.ids[r.ID] = r, r
	s.appendAudit(p.Audit)
	return r.ID, nil
}

// Get implements Store.
func (s *MemoryStore) Get(ctx context.Context, tenant, scope, keyHash string) (Record, error) {
	if err := s.lock(ctx); err != nil {
		return Record{}, err
	}
	defer s.mu.Unlock()
	r, ok := s.rows[memKey{tenant, scope, keyHash}]
	if !ok {
		return Record{}, ErrNotFound
	}
	out := *r
	out.Response = bytes.Clone(r.Response)
	out.Events = cloneEvents(r.Events)
	out.Now = s.clock()
	return out, nil
}

// GetMany implements Store.
func (s *MemoryStore) GetMany(ctx context.Context, tenant, scope string, keyHashes []string) ([]Record, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.clock()
	var out []Record
	for _, h := range keyHashes {
		if r, ok := s.rows[memKey{tenant, scope, h}]; ok {
			c := *r
			c.Response, c.Now = bytes.Clone(r.Response), now
			out = append(out, c)
		}
	}
	return out, nil
}

func (s *MemoryStore) byID(id uint64) *Record { return s.ids[id] }

// Reclaim implements Store.
func (s *MemoryStore) Reclaim(ctx context.Context, p ReclaimParams) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.byID(p.ID)
	if r == nil || r.ClaimNonce != p.OldNonce || r.Attempts != p.OldAttempts {
		return false, nil
	}
	now := s.clock()
	stale := memStale(r, now, p.StaleAfter)
	switch p.Kind {
	case ReclaimExpired:
		if !r.ExpiresAt.Before(now) || (r.Status == RowStarted && !stale) {
			return false, nil
		}
		*r = Record{ID: r.ID, Tenant: r.Tenant, Scope: r.Scope, KeyHash: r.KeyHash,
			Fingerprint: p.Fingerprint, Status: RowStarted, Attempts: 1,
			CreatedAt: now, StartedAt: now, HeartbeatAt: now, ExpiresAt: now.Add(p.TTL), Lease: p.Lease,
			SecretID: p.SecretID}
	case ReclaimStale:
		if !stale {
			return false, nil
		}
		r.Attempts++
		r.StartedAt, r.HeartbeatAt, r.Lease = now, now, p.Lease
	case ReclaimFailed:
		if r.Status != RowFailed || r.Attempts >= p.MaxAttempts || r.ExpiresAt.Before(now) {
			return false, nil
		}
		r.Status = RowStarted
		r.Attempts++
		r.Response, r.ResponseCode, r.CompletedAt, r.Events = nil, 0, time.Time{}, nil
		r.StartedAt, r.HeartbeatAt, r.Lease = now, now, p.Lease
		r.ExpiresAt = laterOf(r.ExpiresAt, now.Add(p.TTL))
	default:
		return false, errors.New("memstore: unknown reclaim kind")
	}
	r.ClaimNonce, r.CancelRequestedAt = p.NewNonce, time.Time{}
	s.appendAudit(p.Audit)
	return true, nil
}

// Abandon implements Store.
func (s *MemoryStore) Abandon(ctx context.Context, p AbandonParams) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.byID(p.ID)
	now := s.clock()
	if r == nil || r.ClaimNonce != p.OldNonce || r.Attempts != p.OldAttempts || !memStale(r, now, p.StaleAfter) {
		return false, nil
	}
	r.Status = RowFailed
	r.Response, r.ResponseCode = bytes.Clone(p.Response), p.ResponseCode
	r.CompletedAt, r.ExpiresAt = now, now.Add(p.TTL)
	s.appendAudit(p.Audit)
	return true, nil
}

// Heartbeat implements Store.
func (s *MemoryStore) Heartbeat(ctx context.Context, id uint64, nonce string) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.byID(id)
	if r == nil || r.Status != RowStarted || r.ClaimNonce != nonce {
		return false, nil
	}
	r.HeartbeatAt = s.clock()
	return true, nil
}

// Complete implements Store.
func (s *MemoryStore) Complete(ctx context.Context, p CompleteParams) (bool, time.Time, error) {
	if err := s.lock(ctx); err != nil {
		return false, time.Time{}, err
	}
	defer s.mu.Unlock()
	r := s.byID(p.ID)
	if r == nil || r.Status != RowStarted || r.ClaimNonce != p.Nonce {
		return false, time.Time{}, nil
	}
	now := s.clock()
	r.Status = p.Status
	r.Response, r.ResponseCode = bytes.Clone(p.Response), p.ResponseCode
	r.Events = cloneEvents(p.Events)
	r.CompletedAt, r.ExpiresAt = now, now.Add(p.TTL)
	if p.Canceled && r.Attempts > 0 {
		r.Attempts--
	}
	return true, now, nil
}

// Release implements Store.
func (s *MemoryStore) Release(ctx context.Context, p ReleaseParams) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.byID(p.ID)
	if r == nil || r.Status != RowStarted || r.ClaimNonce != p.Nonce {
		return false, nil
	}
	if p.Prev == nil {
		delete(s.rows, memKey{r.Tenant, r.Scope, r.KeyHash})
		delete(s.ids, r.ID)
		s.appendAudit(p.Audit)
		return true, nil
	}
	prev := *p.Prev
	r.Status, r.ClaimNonce, r.Attempts = prev.Status, prev.ClaimNonce, prev.Attempts
	r.Response, r.ResponseCode = bytes.Clone(prev.Response), prev.ResponseCode
	r.Events = cloneEvents(prev.Events)
	r.StartedAt, r.HeartbeatAt, r.CompletedAt = prev.StartedAt, prev.HeartbeatAt, prev.CompletedAt
	r.ExpiresAt, r.Lease = prev.ExpiresAt, prev.Lease
	s.appendAudit(p.Audit)
	return true, nil
}

// cloneEvents copies a stored event sequence, keeping nil and empty apart.
func cloneEvents(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// stale reports whether r is a started row whose heartbeat is older than its
// lease (fallback for a row without one) at now.
func memStale(r *Record, now time.Time, fallback time.Duration) bool {
	return r.Status == RowStarted && r.HeartbeatAt.Before(now.Add(-r.LeaseOr(fallback)))
}

// Ping implements Store.
func (s *MemoryStore) Ping(ctx context.Context) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	s.mu.Unlock()
	return nil
}

// Age moves every time of the row back by d, as if d had passed for it alone.
// For tests.
func (s *MemoryStore) Age(tenant, scope, keyHash string, d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[memKey{tenant, scope, keyHash}]
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
func (s *MemoryStore) Rows() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, 0, len(s.rows))
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
func (s *MemoryStore) DeleteExpired(staleAfter time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	n := 0
	for k, r := range s.rows {
		live := r.Status == RowStarted && !memStale(r, now, staleAfter)
		if r.ExpiresAt.Before(now) && !live {
			delete(s.rows, k)
			delete(s.ids, r.ID)
			n++
		}
	}
	return n
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
