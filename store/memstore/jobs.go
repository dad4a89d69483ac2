package memstore

import (
	"context"

	"github.com/idemguard/idemguard/store"
)

// Renew implements store.Store.
func (s *Store) Renew(ctx context.Context, p store.RenewParams) (store.RenewResult, error) {
	if err := s.lock(ctx); err != nil {
		return store.RenewResult{}, err
	}
	defer s.mu.Unlock()
	r := s.held(p.ID, p.Nonce)
	if r == nil {
		return store.RenewResult{}, nil
	}
	now := s.clock()
	r.HeartbeatAt = now
	r.ExpiresAt = laterOf(r.ExpiresAt, now.Add(p.Extend))
	if p.Progress != nil {
		r.Progress = *p.Progress
		r.Progress.At = now
	}
	return store.RenewResult{Renewed: true, CancelRequested: !r.CancelRequestedAt.IsZero()}, nil
}

// RequestCancel implements store.Store.
func (s *Store) RequestCancel(ctx context.Context, p store.CancelParams) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.held(p.ID, p.Nonce)
	if r == nil {
		return false, nil
	}
	r.CancelRequestedAt = s.clock()
	s.appendAudit(p.Audit)
	return true, nil
}
