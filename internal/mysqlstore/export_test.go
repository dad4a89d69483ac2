package mysqlstore

import "database/sql"

// InterpretError exposes the error translation to tests.
var InterpretError = interpretError

// ZeroOKPacketTime makes s's Complete see 0 in the OK packet, as on an
// engine that does not report LAST_INSERT_ID(expr) there.
func ZeroOKPacketTime(s *Store) { s.completedAtOf = func(sql.Result) (int64, error) { return 0, nil } }
