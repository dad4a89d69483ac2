package memstore

import (
	"context"
	"slices"
	"time"

	"github.com/idemguard/idemguard/store"
)

// appendAudit adds e to the trail unless its ID is there already; the
// caller holds s.mu, so a durable event lands with its row change.
func (s *Store) appendAudit(e *store.AuditEvent) {
	if e == nil || s.auditIDs[e.ID] {
		return
	}
	if s.auditIDs == nil {
		s.auditIDs = make(map[string]bool)
	}
	s.auditIDs[e.ID] = true
	c := *e
	c.At = c.At.UTC().Truncate(time.Microsecond)
	c.OriginalAt = c.OriginalAt.UTC().Truncate(time.Microsecond)
	s.audit = append(s.audit, c)
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
	slices.SortStableFunc(out, compareAudit)
	return out[:min(limit, len(out))], nil
}

// AuditEvents returns a copy of the whole audit trail, in the order
// written. For tests.
func (s *Store) AuditEvents() []store.AuditEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.audit)
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
