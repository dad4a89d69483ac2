package mysqlstore

import (
	"context"
	"database/sql"

	"github.com/jmoiron/sqlx"
)

// InterpretError exposes the error translation to tests.
var InterpretError = interpretError

// ZeroOKPacketTime makes s's Complete and Renew see 0 in the OK packet, as
// on an engine that does not report LAST_INSERT_ID(expr) there.
func ZeroOKPacketTime(s *Store) { s.completedAtOf = func(sql.Result) (int64, error) { return 0, nil } }

// OnAuditTx makes s call f inside every audited write's transaction: at
// stage "row" once the row statement won (the audit INSERT is next), and at
// stage "commit" once both ran (COMMIT is next).
func OnAuditTx(s *Store, f func(ctx context.Context, stage string, tx *sqlx.Tx)) { s.auditHook = f }

// CommitError exposes the error translation of a failed COMMIT to tests.
var CommitError = commitError
