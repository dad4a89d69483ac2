package mysqlstore

import (
	"context"
	"errors"

	"github.com/idemguard/idemguard"
)

// AppendAudit implements idemguard.Store.
func (s *Store) AppendAudit(ctx context.Context, events []idemguard.AuditEvent) error {
	return errors.New("mysqlstore: audit not implemented yet")
}

// History implements idemguard.Store.
func (s *Store) History(ctx context.Context, tenant, scope string, keyHashes []string, limit int) ([]idemguard.AuditEvent, error) {
	return nil, errors.New("mysqlstore: audit not implemented yet")
}
