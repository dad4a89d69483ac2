package idemguard

import "context"

// Renew implements Store.
func (s *MemoryStore) Renew(ctx context.Context, p RenewParams) (RenewResult, error) {
	if err := s.lock(ctx); err != nil {
		return RenewResult{}, err
	}
	defer s.mu.Unlock()
	r := s.byID(p.ID)
	if r == nil || r.Status != RowStarted || r.ClaimNonce != p.Nonce {
		return RenewResult{}, nil
	}
	now := s.clock()
	r.HeartbeatAt = now
	r.ExpiresAt = laterOf(r.ExpiresAt, now.Add(p.Extend))
	return RenewResult{Renewed: true, CancelRequested: !r.CancelRequestedAt.IsZero()}, nil
}

// RequestCancel implements Store.
func (s *MemoryStore) RequestCancel(ctx context.Context, p CancelParams) (bool, error) {
	if err := s.lock(ctx); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	r := s.byID(p.ID)
	if r == nil || r.Status != RowStarted || r.ClaimNonce != p.Nonce {
		return false, nil
	}
	r.CancelRequestedAt = s.clock()
	s.appendAudit(p.Audit)
	return true, nil
}
