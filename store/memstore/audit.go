package memstore

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/idemguard/idemguard/store"
)

// tallyKey is what a tally aggregates over (store.Store.AppendAudit).
type tallyKey struct {
	tenant, scope, keyHash string
	kind                   store.AuditKind
	attempt                int
	actor, detail          string
}

// appendAudit adds e to the trail: a durable event unless its ID is there
// already, a tallied one to its tally. The caller holds s.mu, so a durable
// event lands with its row change.
func (s *Store) appendAudit(e *store.AuditEvent) {
	if e == nil {
		return
	}
	c := *e
	c.At = c.At.UTC().Truncate(time.Microsecond)
	c.OriginalAt = c.OriginalAt.UTC().Truncate(time.Microsecond)
	if c.Kind.Tallied() {
		// A tally of its caller's (Count events, the last at LastAt), or
		// one event.
		c.Count = max(1, c.Count)
		c.LastAt = c.LastAt.UTC().Truncate(time.Microsecond)
		if c.LastAt.Before(c.At) {
			c.LastAt = c.At
		}
		c.Replay = 0
		s.tally(c)
		return
	}
	c.Count, c.LastAt, c.Replay = 0, time.Time{}, 0
	if s.auditIDs[e.ID] {
		return
	}
	if s.auditIDs == nil {
		s.auditIDs = make(map[string]bool)
	}
	s.auditIDs[e.ID] = true
	s.audit = append(s.audit, c)
}

// tally adds e (a tally: Count events, from At to LastAt) to its tally,
// keeping the earliest event's ID, At and OriginalAt, and the latest At.
func (s *Store) tally(e store.AuditEvent) {
	k := tallyKey{e.Tenant, e.Scope, e.KeyHash, e.Kind, e.Attempt, e.Actor, e.Detail}
	i, ok := s.tallies[k]
	if !ok {
		if s.tallies == nil {
			s.tallies = make(map[tallyKey]int)
		}
		s.tallies[k] = len(s.audit)
		s.audit = append(s.audit, e)
		return
	}
	t := &s.audit[i]
	t.Count += e.Count
	if e.At.Before(t.At) {
		t.ID, t.At, t.OriginalAt = e.ID, e.At, e.OriginalAt
	}
	if e.LastAt.After(t.LastAt) {
		t.LastAt = e.LastAt
	}
}

// moveClaim moves the claimed event r carries (if any) to the trail, as r
// is about to be overwritten or deleted by an audited write (audited); an
// unaudited write drops it, as the MySQL store's single statement does.
// The caller holds s.mu.
func (s *Store) moveClaim(r *store.Record, audited bool) {
	if e, ok := s.claims[r.ID]; ok {
		delete(s.claims, r.ID)
		if audited {
			s.appendAudit(claimEvent(r, e))
		}
	}
}

// claimEvent is the claimed event row r carries (its ID and Actor in e).
func claimEvent(r *store.Record, e store.AuditEvent) *store.AuditEvent {
	return &store.AuditEvent{ID: e.ID, Kind: store.AuditClaimed, At: r.CreatedAt, Tenant: r.Tenant, Scope: r.Scope,
		KeyHash: r.KeyHash, Attempt: 1, Actor: e.Actor}
}

// AppendAudit implements store.Store.
func (s *Store) AppendAudit(ctx context.Context, events []store.AuditEvent) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	for i := range events {
		s.appendAudit(&events[i])
	}
	return nil
}

// History implements store.Store.
func (s *Store) History(ctx context.Context, tenant, scope string, keyHashes []string, limit int) ([]store.AuditEvent, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if limit <= 0 {
		return nil, nil
	}
	var out []store.AuditEvent
	for _, e := range s.audit {
		if e.Tenant == tenant && e.Scope == scope && slices.Contains(keyHashes, e.KeyHash) {
			out = append(out, e)
		}
	}
	for _, h := range keyHashes {
		if r, ok := s.rows[memKey{tenant, scope, h}]; ok {
			if e, ok := s.claims[r.ID]; ok && !s.auditIDs[e.ID] {
				out = append(out, *claimEvent(r, e))
			}
		}
	}
	slices.SortStableFunc(out, compareAudit)
	return out[:min(limit, len(out))], nil
}

// AuditEvents returns a copy of the whole audit trail: what was written to
// it, in that order (a tally where it began), then the claimed events the
// rows still carry, by row id. For tests.
func (s *Store) AuditEvents() []store.AuditEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.audit)
	ids := slices.Sorted(maps.Keys(s.claims))
	for _, id := range ids {
		if r := s.ids[id]; r != nil {
			out = append(out, *claimEvent(r, s.claims[id]))
		}
	}
	return out
}

// compareAudit orders events by At, then ID.
func compareAudit(a, b store.AuditEvent) int {
	if c := a.At.Compare(b.At); c != 0 {
		return c
	}
	switch {
	case a.ID < b.ID:
		return -1
	case a.ID > b.ID:
		return 1
	}
	return 0
}
