package idemguard

import (
	"context"
	"database/sql"
	"time"

	"github.com/idemguard/idemguard/internal/mysqlconn"
)

// PoolConfig sizes the connection pool OpenMySQL creates. The zero value is
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

// OpenMySQL opens a pool for NewMySQLStore and pings the server within ctx.
// dsn is a go-sql-driver/mysql DSN (user:pass@tcp(host:3306)/db); it is
// normalized exactly as `idemguard serve` does: parseTime=true, loc=UTC,
// interpolateParams=true, time_zone='+00:00' and sql_mode='TRADITIONAL'
// override the DSN's own values, and a DSN the driver would read differently
// is rejected. Errors never carry the password. On error nothing is left
// open.
func OpenMySQL(ctx context.Context, dsn string, pool PoolConfig) (*sql.DB, error) {
	db, err := mysqlconn.Open(ctx, dsn, mysqlconn.PoolConfig{MaxOpenConns: pool.MaxOpenConns,
		MaxIdleConns: pool.MaxIdleConns, ConnMaxLifetime: pool.ConnMaxLifetime})
	if err != nil {
		return nil, err
	}
	return db.DB, nil
}
