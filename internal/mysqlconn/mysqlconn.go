// Package mysqlconn is the only place in idemguard that builds MySQL DSNs and connection pools.
//
// Every connection idemguard opens goes through [NormalizeDSN], so every session runs with the
// same settings, whatever the operator wrote in the DSN:
//
//   - parseTime=true, loc=UTC: DATETIME(6) columns scan into time.Time in UTC.
//   - time_zone='+00:00': the session clock (UTC_TIMESTAMP(6), NOW(6)) and any TIMESTAMP value
//     are in UTC. Every "now" in idemguard is the database's clock, never the app's.
//   - sql_mode='TRADITIONAL': strict mode. Too-long values and bad dates are errors (1406, 1292),
//     never silent truncations; a truncated tenant or key would be a collision.
//   - interpolateParams=true: one round trip per statement instead of prepare/execute/close.
//     Safe because the connection charset stays utf8mb4 (the driver refuses it for the unsafe
//     multi-byte collations big5, gbk, sjis, ...). The few queries marked with [Prepare] (a
//     fresh key's claim and completion, a store replay's read) are the exception: each
//     connection prepares them once and executes them by id, still one round trip.
//   - clientFoundRows=false: RowsAffected reports rows *changed*, not rows matched. The claim
//     protocol relies on this: a guarded UPDATE won iff it changed the row, and the store reads
//     that from RowsAffected, so an operator cannot switch it.
//   - timeout=5s unless the DSN sets one: a dead server fails fast instead of hanging a request.
//
// Passwords never appear in errors or logs: use [Redact] for any DSN that is printed.
package mysqlconn

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
)

// DefaultDialTimeout is the dial timeout [NormalizeDSN] sets when the DSN has none.
const DefaultDialTimeout = 5 * time.Second

// Pool defaults, applied by [Open] to zero fields of [PoolConfig].
const (
	DefaultMaxOpenConns    = 32
	DefaultConnMaxLifetime = 5 * time.Minute
)

// redacted replaces the password in DSNs returned by [Redact].
const redacted = "xxxxx"

// NormalizeDSN parses dsn (go-sql-driver form: user:password@tcp(host:3306)/dbname?params) and
// returns it with idemguard's session settings forced (see the package documentation). The result
// is stable: normalizing it again returns the same string.
//
// The error says what is wrong with dsn and never contains its password.
func NormalizeDSN(dsn string) (string, error) {
	if strings.TrimSpace(dsn) == "" {
		return "", errors.New("mysqlconn: DSN is empty; expected user:password@tcp(host:3306)/dbname")
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", dsnError(dsn, err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.InterpolateParams = true
	cfg.ClientFoundRows = false
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultDialTimeout
	}
	if cfg.Params == nil {
		cfg.Params = make(map[string]string)
	}
	cfg.Params["time_zone"] = "'+00:00'"
	cfg.Params["sql_mode"] = "'TRADITIONAL'"

	out := cfg.FormatDSN()
	// Parse the result once more: this is what the driver will do in sql.Open, and it catches
	// combinations the driver rejects only at that point (interpolateParams with an unsafe
	// collation).
	again, err := mysql.ParseDSN(out)
	if err != nil {
		return "", dsnError(dsn, err)
	}
	// The driver re-reads some malformed addresses differently each time (e.g. "tcp(])"); a DSN
	// that does not survive a round trip is rejected rather than guessed at.
	if again.FormatDSN() != out {
		return "", dsnError(dsn, fmt.Errorf("network address %q does not parse back the same; expected host:port", cfg.Addr))
	}
	return out, nil
}

func dsnError(dsn string, err error) error {
	msg := err.Error()
	// ParseDSN errors quote parameter values, and a password containing '/' or '?' could be
	// mistaken for one. Scrub whatever the driver would take as the password, to be safe.
	if _, _, pw, ok := splitPassword(dsn); ok && pw != "" {
		msg = strings.ReplaceAll(msg, pw, redacted)
	}
	hint := ""
	if strings.Contains(dsn, "://") {
		hint = " (use the go-sql-driver form user:password@tcp(host:3306)/dbname, not a URL)"
	}
	return fmt.Errorf("mysqlconn: invalid DSN %q: %s%s", Redact(dsn), msg, hint)
}

// Redact returns dsn with its password replaced by "xxxxx", for logs and error messages. It finds
// the password exactly where the driver's parser does, and also works on DSNs that do not parse.
// A DSN without a password is returned unchanged.
func Redact(dsn string) string {
	before, after, pw, ok := splitPassword(dsn)
	if !ok || pw == "" {
		return dsn
	}
	return before + redacted + after
}

// splitPassword locates the password in dsn the way mysql.ParseDSN does: the user info ends at the
// last '@' before the last '/', and the password starts after the first ':' in it. If dsn has no
// '/', the last '@' is used, so that malformed DSNs are redacted too. A URL
// (mysql://user:password@host/db, which the driver refuses) is split as a URL, so that its
// redacted form keeps the scheme, user, host and database intact.
func splitPassword(dsn string) (before, after, password string, ok bool) {
	if i := strings.Index(dsn, "://"); i >= 0 && !strings.ContainsAny(dsn[:i], "@/:(") {
		// The user info ends at the last '@' before the query: a password with an unescaped '/'
		// is still hidden whole.
		start := i + 3
		authority := dsn[start:]
		if end := strings.IndexAny(authority, "?#"); end >= 0 {
			authority = authority[:end]
		}
		at := strings.LastIndexByte(authority, '@')
		if at < 0 {
			return "", "", "", false
		}
		colon := strings.IndexByte(authority[:at], ':')
		if colon < 0 {
			return "", "", "", false
		}
		return dsn[:start+colon+1], dsn[start+at:], authority[colon+1 : at], true
	}
	end := strings.LastIndexByte(dsn, '/')
	if end < 0 {
		end = len(dsn)
	}
	at := strings.LastIndexByte(dsn[:end], '@')
	if at < 0 {
		return "", "", "", false
	}
	colon := strings.IndexByte(dsn[:at], ':')
	if colon < 0 {
		return "", "", "", false
	}
	return dsn[:colon+1], dsn[at:], dsn[colon+1 : at], true
}

// PoolConfig sizes the connection pool [Open] creates. The zero value is valid: zero fields take
// their defaults.
type PoolConfig struct {
	// MaxOpenConns caps open connections to the server. Defaults to [DefaultMaxOpenConns] (32).
	MaxOpenConns int
	// MaxIdleConns caps idle connections kept for reuse. Defaults to MaxOpenConns, so a busy
	// service does not churn connections.
	MaxIdleConns int
	// ConnMaxLifetime closes connections older than this, so that load balancers, failovers and
	// server-side wait_timeout never hand the pool a dead connection. Defaults to
	// [DefaultConnMaxLifetime] (5 minutes).
	ConnMaxLifetime time.Duration
}

func (p PoolConfig) withDefaults() PoolConfig {
	p.MaxOpenConns = cmp.Or(p.MaxOpenConns, DefaultMaxOpenConns)
	p.MaxIdleConns = cmp.Or(p.MaxIdleConns, p.MaxOpenConns)
	p.ConnMaxLifetime = cmp.Or(p.ConnMaxLifetime, DefaultConnMaxLifetime)
	return p
}

func (p PoolConfig) validate() error {
	switch {
	case p.MaxOpenConns < 0:
		return fmt.Errorf("mysqlconn: PoolConfig.MaxOpenConns is %d; it must be positive, or 0 for the default %d", p.MaxOpenConns, DefaultMaxOpenConns)
	case p.MaxIdleConns < 0:
		return fmt.Errorf("mysqlconn: PoolConfig.MaxIdleConns is %d; it must be positive, or 0 to match MaxOpenConns", p.MaxIdleConns)
	case p.ConnMaxLifetime < 0:
		return fmt.Errorf("mysqlconn: PoolConfig.ConnMaxLifetime is %s; it must be positive, or 0 for the default %s", p.ConnMaxLifetime, DefaultConnMaxLifetime)
	}
	return nil
}

// Open normalizes dsn (see [NormalizeDSN]), opens a pool sized by pool, and pings the server
// within ctx. On any error nothing is left open, and the error carries the redacted DSN.
//
// A connection the pool cannot hand out fails with a [*ConnectError]: no statement was sent.
// Once a dial has failed, the pool remembers the server as down and fails every connection asked
// for at once, while one background probe dials with backoff (at most every 250 ms) until the
// server answers again; closing the pool stops the probe.
func Open(ctx context.Context, dsn string, pool PoolConfig) (*sqlx.DB, error) {
	if err := pool.validate(); err != nil {
		return nil, err
	}
	pool = pool.withDefaults()
	normalized, err := NormalizeDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg, err := mysql.ParseDSN(normalized)
	if err != nil {
		return nil, dsnError(dsn, err)
	}
	if cfg.Net == "tcp" || cfg.Net == "unix" {
		cfg.DialFunc = dial // statements without the driver's watcher (interrupt.go)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysqlconn: open %s: %w", Redact(dsn), err)
	}
	db := sqlx.NewDb(sql.OpenDB(newBreaker(conn)), "mysql")
	db.SetMaxOpenConns(pool.MaxOpenConns)
	db.SetMaxIdleConns(pool.MaxIdleConns)
	db.SetConnMaxLifetime(pool.ConnMaxLifetime)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("mysqlconn: ping %s: %w", Redact(dsn), err)
	}
	return db, nil
}

// WithDatabase returns dsn, normalized, with its database name replaced by name.
func WithDatabase(dsn, name string) (string, error) {
	normalized, err := NormalizeDSN(dsn)
	if err != nil {
		return "", err
	}
	cfg, err := mysql.ParseDSN(normalized)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", Redact(normalized), err)
	}
	cfg.DBName = name
	return cfg.FormatDSN(), nil
}
