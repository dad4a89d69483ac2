package idemguard

import (
	"database/sql"

	"github.com/jmoiron/sqlx"

	"github.com/idemguard/idemguard/internal/engine"
	"github.com/idemguard/idemguard/internal/memstore"
	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/internal/storeseam"
)

func init() {
	storeseam.Wrap = func(s engine.Store) any { return store{s} }
}

// Store keeps the keys: MySQL (and MariaDB, TiDB) through NewMySQLStore, or
// memory through NewMemoryStore.
//
// Store is sealed: only this package implements it. The guarantees of
// WithIdempotency (one execution in flight per key, a replaced owner never
// overwrites the new owner's answer) rest on exact semantics of every store
// call — which write wins a race, what a guarded update reports — and each
// implementation is proven against one conformance suite. A store written
// elsewhere would not be, so none can be plugged in.
type Store interface {
	engineStore() engine.Store
}

type store struct{ s engine.Store }

func (s store) engineStore() engine.Store { return s.s }

// NewMySQLStore returns a Store on db, a MySQL 8 / MariaDB 10.11+ pool with
// the idemguard migrations applied (Migrate). db must have been opened with
// the DSN parameters parseTime=true, loc=UTC and time_zone='+00:00';
// OpenMySQL sets them. The Store does not close db.
func NewMySQLStore(db *sql.DB) Store {
	return store{mysqlstore.New(sqlx.NewDb(db, "mysql"))}
}

// NewMemoryStore returns an empty in-memory Store: for tests, examples and
// single-process development. Nothing survives the process, and two
// processes never share a key.
func NewMemoryStore() Store {
	return store{memstore.New()}
}
