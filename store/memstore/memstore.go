// Package memstore is the in-memory store.Store: for tests, examples and
// single-process development. Nothing survives the process and two
// processes never share a key, so it guards nothing across replicas. It is
// held to the same conformance suite (package storetest) as the MySQL store.
//
// Rows, AuditEvents and Age exist for tests: they read or age the store's
// rows directly, which a database-backed store does with SQL.
package memstore

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemguard/idemguard/store"
)

var _ store.Store = (*Store)(nil)

// ErrClosed is returned by every method after Close: to a guard, a store
// that cannot answer.
var ErrClosed = errors.New("idemguard: memory store closed")

// Store is the in-memory store.Store. It is safe for concurrent use.
type Store struct {
	mu     sync.Mutex
	now    func() time.Time
	nextID uint64
	rows   map[memKey]*store.Record
	ids    map[uint64]*store.Record
	closed bool
	// audit is the audit trail, in the order written (audit.go): the
	// durable events, one each, and the tallies, in tallies.
	audit    []store.AuditEvent
	auditIDs map[string]bool
	tallies  map[tallyKey]int // index in audit of each tally
	// claims holds the claimed event a row carries, by row id (see
	// store.ClaimParams.Audit): only its ID and Actor; History dates it by
	// the row's CreatedAt.
	claims map[uint64]store.AuditEvent
}

type memKey struct{ tenant, scope, keyHash string }

// Option configures a Store.
type Option func(*Store)

// WithClock sets the store's clock (the stand-in for the database clock).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{now: time.Now, rows: make(map[memKey]*store.Record), ids: make(map[uint64]*store.Record)}
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

// Claim implements store.Store.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (uint64, error) {
	if err := s.lock(ctx); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	k := memKey{p.Tenant, p.Scope, p.KeyHash}
	if _, ok := s.rows[k]; ok {
		return 0, store.ErrDuplicate
	}
	now := s.clock()
	s.nextID++
	r := &store.Record{ID: s.nextID, Tenant: p.Tenant, Scope: p.Scope, KeyHash: p.KeyHash,
		Fingerprint: p.Fingerprint, Status: store.RowStarted, Attempts: 1, ClaimNonce: p.Nonce,
		CreatedAt: now, StartedAt: now, HeartbeatAt: now, ExpiresAt: now.Add(p.TTL), Lease: p.Lease,
		SecretID: p.SecretID}
	s.rows[k], s.ids[r.ID] = r, r
	if p.Audit != nil {
		if s.claims == nil {
			s.claims = make(map[uint64]store.AuditEvent)
		}
		s.claims[r.ID] = store.AuditEvent{ID: p.Audit.ID, Actor: p.Audit.Actor}
	}
	return r.ID, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, tenant, scope, keyHash string) (store.Record, error) {
	if err := s.lock(ctx); err != nil {
		return store.Record{}, err
	}
	defer s.mu.Unlock()
	r, ok := s.rows[memKey{tenant, scope, keyHash}]
	if !ok {
		return store.Record{}, store.ErrNotFound
	}
	out := *r
	out.Response = bytes.Clone(r.Response)
	out.Events = cloneEvents(r.Events)
	out.Now = s.clock()
	return out, nil
}

// GetMany implements store.Store.
func (s *Store) GetMany(ctx context.Context, tenant, scope string, keyHashes []string) ([]store.Record, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.clock()
	var out []store.Record
	for _, h := range keyHashes {
		if r, ok := s.rows[memKey{tenant, scope, h}]; ok {
			c := *r
			c.Response, c.Now = bytes.Clone(r.Response), now
			out = append(out, c)
		}
	}
	return out, nil
}

func (s *Store) byID(id uint64) *store.Record { return s.ids[id] }

// held is the running row id while the claim nonce still holds it; nil
// once another claim took it over or it ended.
func (s *Store) held(id uint64, nonce string) *store.Record {
	r := s.byID(id)
	if r == nil || r.Status != store.RowStarted || r.ClaimNonce != nonce {
		return nil
	}
	return r
}

// claimOf is row id while it is still the claim seen as (nonce, attempts),
// whatever its status: what a takeover or an abandon compares and swaps.
func (s *Store) claimOf(id uint64, nonce string, attempts int) *store.Record {
	r := s.byID(id)
	if r == nil || r.ClaimNonce != nonce || r.Attempts != attempts {
		return nil
	}
	return r
}

// Reclaim implements store.Store.
func (s *Store) Reclaim(ctx context.Context, p store.ReclaimParams) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.claimOf(p.ID, p.OldNonce, p.OldAttempts)
	if r == nil {
		return false, nil
	}
	now := s.clock()
	rec := judged(r, now)
	switch p.Kind {
	case store.ReclaimExpired:
		if !rec.Reclaimable(p.StaleAfter) {
			return false, nil
		}
		s.moveClaim(r, p.Audit != nil)
		*r = store.Record{ID: r.ID, Tenant: r.Tenant, Scope: r.Scope, KeyHash: r.KeyHash,
			Fingerprint: p.Fingerprint, Status: store.RowStarted, Attempts: 1,
			CreatedAt: now, StartedAt: now, HeartbeatAt: now, ExpiresAt: now.Add(p.TTL), Lease: p.Lease,
			SecretID: p.SecretID}
	case store.ReclaimStale:
		if !rec.Stale(p.StaleAfter) {
			return false, nil
		}
		r.Attempts++
		r.StartedAt, r.HeartbeatAt, r.Lease = now, now, p.Lease
	case store.ReclaimFailed:
		if r.Status != store.RowFailed || r.Attempts >= p.MaxAttempts || rec.Expired() {
			return false, nil
		}
		runAgain(r, now, p)
	case store.ReclaimForced:
		if r.Status == store.RowStarted || rec.Expired() {
			return false, nil
		}
		runAgain(r, now, p)
	default:
		return false, errors.New("memstore: unknown reclaim kind")
	}
	r.ClaimNonce, r.CancelRequestedAt, r.Progress = p.NewNonce, time.Time{}, store.Progress{}
	s.appendAudit(p.Audit)
	return true, nil
}

// runAgain makes the finished row r started again as the next attempt (a retry of a
// failure, a forced run): the response cleared, a new lease, alive for at least p.TTL.
func runAgain(r *store.Record, now time.Time, p store.ReclaimParams) {
	r.Status = store.RowStarted
	r.Attempts++
	r.Response, r.ResponseCode, r.CompletedAt, r.Events = nil, 0, time.Time{}, nil
	r.StartedAt, r.HeartbeatAt, r.Lease = now, now, p.Lease
	r.ExpiresAt = laterOf(r.ExpiresAt, now.Add(p.TTL))
}

// Reset implements store.Store.
func (s *Store) Reset(ctx context.Context, p store.ResetParams) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.claimOf(p.ID, p.OldNonce, p.OldAttempts)
	now := s.clock()
	if r == nil || r.Status == store.RowStarted || judged(r, now).Expired() {
		return false, nil
	}
	r.ClaimNonce, r.CancelRequestedAt = p.NewNonce, time.Time{}
	r.ExpiresAt = time.Unix(1, 0).UTC() // past on every clock, even one stepped back since
	s.appendAudit(p.Audit)
	return true, nil
}

// Abandon implements store.Store.
func (s *Store) Abandon(ctx context.Context, p store.AbandonParams) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.claimOf(p.ID, p.OldNonce, p.OldAttempts)
	now := s.clock()
	if r == nil || !judged(r, now).Stale(p.StaleAfter) {
		return false, nil
	}
	r.Status = store.RowFailed
	r.Response, r.ResponseCode = bytes.Clone(p.Response), p.ResponseCode
	r.CompletedAt, r.ExpiresAt = now, now.Add(p.TTL)
	s.appendAudit(p.Audit)
	return true, nil
}

// Heartbeat implements store.Store.
func (s *Store) Heartbeat(ctx context.Context, id uint64, nonce string) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.held(id, nonce)
	if r == nil {
		return false, nil
	}
	r.HeartbeatAt = s.clock()
	return true, nil
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, p store.CompleteParams) (bool, time.Time, error) {
	if err := s.lock(ctx); err != nil {
		return false, time.Time{}, err
	}
	defer s.mu.Unlock()
	r := s.held(p.ID, p.Nonce)
	if r == nil {
		return false, time.Time{}, nil
	}
	now := s.clock()
	r.Status = p.Status
	r.Response, r.ResponseCode = bytes.Clone(p.Response), p.ResponseCode
	r.Events = cloneEvents(p.Events)
	r.CompletedAt, r.ExpiresAt = now, now.Add(p.TTL)
	if p.Progress != nil {
		r.Progress = *p.Progress
		r.Progress.At = now
	}
	if p.Canceled && r.Attempts > 0 {
		r.Attempts--
	}
	return true, now, nil
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, p store.ReleaseParams) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.held(p.ID, p.Nonce)
	if r == nil {
		return false, nil
	}
	if p.Prev == nil {
		s.moveClaim(r, p.Audit != nil)
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

// judged is r as read at now, for the staleness rule's methods
// (store.Record.Expired, Stale, Reclaimable): the one definition of the rule.
func judged(r *store.Record, now time.Time) store.Record {
	c := *r
	c.Now = now
	return c
}

// Ping implements store.Store.
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
func (s *Store) Rows() []store.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]store.Record, 0, len(s.rows))
	for _, r := range s.rows {
		c := *r
		c.Response = bytes.Clone(r.Response)
		out = append(out, c)
	}
	return out
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
