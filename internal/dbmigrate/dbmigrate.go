// Package dbmigrate applies idemguard's embedded migrations (package migrations) with goose.
//
// # Concurrency
//
// Several replicas may run `idemguard migrate up` at the same time (e.g. one per pod at deploy).
// Every function that reads or changes the schema version takes a MySQL named lock first
// ([SessionLocker]: GET_LOCK on the same connection goose then migrates on), so migrations run
// one replica at a time; the others wait up to [LockTimeout], then see nothing left to do.
//
// The lock name is per database (LockNamePrefix + DATABASE()), so databases on one server, such
// as parallel test databases, do not wait for each other.
//
// All functions are safe for concurrent use.
package dbmigrate

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/idemguard/idemguard/migrations"
)

// VersionTable is the table in which goose records applied migrations.
const VersionTable = goose.DefaultTablename

// LockNamePrefix starts the name of the MySQL named lock that serializes migrations; the database
// name follows it.
const LockNamePrefix = "idemguard_migrate."

// LockTimeout is how long a migration waits for another replica's migration to finish before it
// gives up with [ErrLocked].
const LockTimeout = 2 * time.Minute

// ErrLocked is returned when another session held the migration lock for longer than the lock
// timeout.
var ErrLocked = errors.New("dbmigrate: another migration holds the lock")

// ErrNothingToRollBack is returned by [Down] when no migration is applied.
var ErrNothingToRollBack = errors.New("dbmigrate: no applied migration to roll back")

// MigrationStatus is the state of one known migration.
type MigrationStatus struct {
	Version int64
	// Source is the migration's file name, e.g. "00001_create_idempotency_keys.sql".
	Source  string
	Applied bool
	// AppliedAt is when the migration was applied, in UTC (database clock); zero when pending.
	AppliedAt time.Time
}

// Option configures a call.
type Option func(*options)

type options struct {
	logger      *slog.Logger
	lockTimeout time.Duration
}

// WithLogger logs each applied or rolled back migration to logger.
func WithLogger(logger *slog.Logger) Option {
	return func(o *options) { o.logger = logger }
}

// WithLockTimeout overrides [LockTimeout]. It is rounded up to whole seconds (GET_LOCK's unit).
func WithLockTimeout(d time.Duration) Option {
	return func(o *options) { o.lockTimeout = d }
}

func newProvider(db *sql.DB, opts []Option) (*goose.Provider, error) {
	if db == nil {
		return nil, errors.New("dbmigrate: db is nil")
	}
	o := options{lockTimeout: LockTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	gopts := []goose.ProviderOption{
		goose.WithSessionLocker(&SessionLocker{Timeout: o.lockTimeout}),
		goose.WithDisableGlobalRegistry(true),
	}
	if o.logger != nil {
		gopts = append(gopts, goose.WithSlog(o.logger), goose.WithVerbose(true))
	}
	p, err := goose.NewProvider(goose.DialectMySQL, db, migrations.FS, gopts...)
	if err != nil {
		return nil, fmt.Errorf("dbmigrate: load migrations: %w", err)
	}
	return p, nil
}

// ensureVersionTable makes the provider create its version table, if missing, while holding the
// migration lock.
//
// Provider.Up first calls HasPending, which (by goose's design) runs without the lock and would
// create the version table unlocked, racing other replicas. A locked call first (GetDBVersion
// takes the session lock, then ensures the table) makes the provider do that step, once per
// provider, under the lock; the later unlocked HasPending then finds it done.
func ensureVersionTable(ctx context.Context, p *goose.Provider) error {
	if _, err := p.GetDBVersion(ctx); err != nil {
		return fmt.Errorf("dbmigrate: prepare version table %s: %w", VersionTable, err)
	}
	return nil
}

// Up applies every pending migration. It returns nil when there is nothing to do.
func Up(ctx context.Context, db *sql.DB, opts ...Option) error {
	p, err := newProvider(db, opts)
	if err != nil {
		return err
	}
	if err := ensureVersionTable(ctx, p); err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("dbmigrate: up: %w", err)
	}
	return nil
}

// Down rolls back the most recently applied migration. With none applied it returns
// [ErrNothingToRollBack].
func Down(ctx context.Context, db *sql.DB, opts ...Option) error {
	p, err := newProvider(db, opts)
	if err != nil {
		return err
	}
	if _, err := p.Down(ctx); err != nil {
		if errors.Is(err, goose.ErrNoNextVersion) {
			return ErrNothingToRollBack
		}
		return fmt.Errorf("dbmigrate: down: %w", err)
	}
	return nil
}

// Status lists every known migration in version order, applied or pending. It creates the version
// table if it is missing (under the lock).
func Status(ctx context.Context, db *sql.DB, opts ...Option) ([]MigrationStatus, error) {
	p, err := newProvider(db, opts)
	if err != nil {
		return nil, err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("dbmigrate: status: %w", err)
	}
	out := make([]MigrationStatus, 0, len(st))
	for _, s := range st {
		ms := MigrationStatus{
			Version: s.Source.Version,
			Source:  path.Base(s.Source.Path),
			Applied: s.State == goose.StateApplied,
		}
		if ms.Applied {
			ms.AppliedAt = s.AppliedAt.UTC()
		}
		out = append(out, ms)
	}
	return out, nil
}

// Pending reports whether any known migration is not applied. It takes no lock and changes
// nothing (a missing version table means everything is pending), so a readiness probe may call it
// while another replica migrates. It needs SELECT on information_schema and the version table.
func Pending(ctx context.Context, db *sql.DB) (bool, error) {
	if db == nil {
		return false, errors.New("dbmigrate: db is nil")
	}
	var exists bool
	err := db.QueryRowContext(ctx,
		`SELECT EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?)`,
		VersionTable).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("dbmigrate: pending: look for version table %s: %w", VersionTable, err)
	}
	if !exists {
		return true, nil
	}
	p, err := newProvider(db, nil)
	if err != nil {
		return false, err
	}
	pending, err := p.HasPending(ctx)
	if err != nil {
		return false, fmt.Errorf("dbmigrate: pending: %w", err)
	}
	return pending, nil
}

// SessionLocker serializes goose runs with a MySQL named lock (GET_LOCK / RELEASE_LOCK). Named
// locks belong to a session, so both calls must get the same connection, which goose guarantees
// for a [lock.SessionLocker]: it locks, migrates and unlocks on one *sql.Conn. If the process
// dies, the server drops the session and with it the lock.
//
// It works on MySQL 5.7+, MariaDB 10.0+ and TiDB (with tidb_enable_noop_functions off, TiDB
// implements GET_LOCK since v5.x).
type SessionLocker struct {
	// Timeout is how long SessionLock waits for another session's lock. Defaults to [LockTimeout].
	Timeout time.Duration
}

var _ lock.SessionLocker = (*SessionLocker)(nil)

// lockName returns the lock name for the connection's current database. MySQL limits lock names
// to 64 characters; longer names are shortened with a hash.
func lockName(ctx context.Context, conn *sql.Conn) (string, error) {
	var db sql.NullString
	if err := conn.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&db); err != nil {
		return "", fmt.Errorf("dbmigrate: read current database: %w", err)
	}
	if !db.Valid || db.String == "" {
		return "", errors.New("dbmigrate: no database selected; the DSN must name the database to migrate")
	}
	name := LockNamePrefix + db.String
	if len(name) > 64 {
		sum := sha256.Sum256([]byte(db.String))
		name = LockNamePrefix + hex.EncodeToString(sum[:16])
	}
	return name, nil
}

// SessionLock waits for the migration lock on conn. Timing out, or a NULL from GET_LOCK (an error
// on the server, e.g. killed), is an error wrapping [ErrLocked].
func (l *SessionLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	name, err := lockName(ctx, conn)
	if err != nil {
		return err
	}
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = LockTimeout
	}
	secs := int64((timeout + time.Second - 1) / time.Second)
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, name, secs).Scan(&got); err != nil {
		return fmt.Errorf("dbmigrate: take migration lock %q: %w", name, err)
	}
	switch {
	case !got.Valid:
		return fmt.Errorf("%w %q: GET_LOCK returned NULL", ErrLocked, name)
	case got.Int64 != 1:
		return fmt.Errorf("%w %q: still held after %ds; is another `idemguard migrate` running?", ErrLocked, name, secs)
	}
	return nil
}

// SessionUnlock releases the lock taken by SessionLock on the same conn.
func (l *SessionLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	name, err := lockName(ctx, conn)
	if err != nil {
		return err
	}
	var released sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT RELEASE_LOCK(?)`, name).Scan(&released); err != nil {
		return fmt.Errorf("dbmigrate: release migration lock %q: %w", name, err)
	}
	if !released.Valid || released.Int64 != 1 {
		return fmt.Errorf("dbmigrate: release migration lock %q: this session did not hold it", name)
	}
	return nil
}
