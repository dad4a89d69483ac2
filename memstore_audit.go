package idemguard

import (
	"context"
	"slices"
	"time"
)

// appendAudit adds e to the trail unless its ID is there already; the
// caller holds s.mu, so a durable event lands with its row change.
func (s *MemoryStore) appendAudit(e *AuditEvent) {
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

// AppendAudit implements Store.
func (s *MemoryStore) AppendAudit(ctx context.Context, events []AuditEvent) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	for i := range events {
		s.appendAudit(&events[i])
	}
	return nil
}

// History implements Store.
func (s *MemoryStore) History(ctx context.Context, tenant, scope string, keyHashes []string, limit int) ([]AuditEvent, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if limit <= 0 {
		return nil, nil
	}
	var out []AuditEvent
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
func (s *MemoryStore) AuditEvents() []AuditEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.audit)
}

// DeleteAuditBefore removes the audit events older than t and returns how
// many it removed: the in-memory counterpart of cleanup's audit retention.
func (s *MemoryStore) DeleteAuditBefore(t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.audit)
	s.audit = slices.DeleteFunc(s.audit, func(e AuditEvent) bool {
		if e.At.Before(t) {
			delete(s.auditIDs, e.ID)
			return true
		}
		return false
	})
	return n - len(s.audit)
}

// compareAudit orders events by At, then ID.
func compareAudit(a, b AuditEvent) int {
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
