package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/store"
	"github.com/jmoiron/sqlx"
)

// PoolConfig sizes the connection pool Open creates. The zero value is
// valid: zero fields take their defaults.
type PoolConfig struct {
	// MaxOpenConns caps open connections. Defaults to 32.
	MaxOpenConns int
	// MaxIdleConns caps idle connections kept for reuse. Defaults to
	// MaxOpenConns.
	MaxIdleConns int
	// ConnMaxLifetime closes connections older than this. Defaults to 5
	// minutes.
	ConnMaxLifetime time.Duration
}

// Open opens a pool for NewStore and pings the server within ctx.
// dsn is a go-sql-driver/mysql DSN (user:pass@tcp(host:3306)/db); it is
// normalized exactly as `idemguard serve` does: parseTime=true, loc=UTC,
// interpolateParams=true, time_zone='+00:00' and sql_mode='TRADITIONAL'
// override the DSN's own values, and a DSN the driver would read differently
// is rejected. Errors never carry the password. On error nothing is left
// open.
//
// Once a connection attempt fails (refused, timed out, rejected at the
// handshake), the pool remembers the server as down: every statement fails
// at once, as not sent (store.ErrNotSent), instead of dialing again, while
// one background probe dials with backoff (at most every 250 ms) until the
// server answers. Closing the pool stops the probe.
//
// A statement ends when its context does, with the context's error, and
// its connection is dropped, as with the driver alone; but the pool ends
// it itself (a deadline in the past on the connection's socket) instead
// of handing each statement's context to a goroutine of the driver's, a
// scheduler hand-off each way on every statement.
func Open(ctx context.Context, dsn string, pool PoolConfig) (*sql.DB, error) {
	db, err := mysqlconn.Open(ctx, dsn, mysqlconn.PoolConfig{MaxOpenConns: pool.MaxOpenConns,
		MaxIdleConns: pool.MaxIdleConns, ConnMaxLifetime: pool.ConnMaxLifetime})
	if err != nil {
		return nil, err
	}
	return db.DB, nil
}

// NewStore returns the store.Store on db, a MySQL 8 / MariaDB 10.11+ pool
// with the idemguard migrations applied (Migrate). db must have been opened
// with the DSN parameters parseTime=true, loc=UTC and time_zone='+00:00';
// Open sets them. The Store does not close db.
func NewStore(db *sql.DB) store.Store {
	return mysqlstore.New(sqlx.NewDb(db, "mysql"))
}
