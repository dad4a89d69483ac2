package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemguard/idemguard/internal/dbmigrate"
	"github.com/idemguard/idemguard/internal/mysqlconn"
)

// EnvMySQLDSN names the environment variable holding the database DSN, used when --dsn is absent.
const EnvMySQLDSN = "IDEMGUARD_MYSQL_DSN"

const migrateUsage = `usage: idemguard migrate [flags] up|down|status

  up      apply every pending migration (safe to run from several replicas at once)
  down    roll back the most recent migration
  status  list every migration: version, applied|pending, applied time (UTC), file

flags:
`

// runMigrate implements `idemguard migrate up|down|status`.
func runMigrate(ctx context.Context, e env, args []string) int {
	dsnFlag, action, lockTimeout, code, ok := parseMigrateFlags(e, args)
	if !ok {
		return code
	}
	dsn, ok := resolveDSN(e, "migrate", dsnFlag)
	if !ok {
		return exitUsage
	}
	log := e.logger.With("dsn", mysqlconn.Redact(dsn), "action", action)
	fail := func(msg string, err error) int {
		log.ErrorContext(ctx, "migrate: "+msg, "err", err)
		return exitError
	}
	// Two connections: goose holds the migration lock on one and checks pending versions on
	// another.
	db, err := mysqlconn.Open(ctx, dsn, mysqlconn.PoolConfig{MaxOpenConns: 4})
	if err != nil {
		return fail("connect to database", err)
	}
	defer db.Close()

	opts := []dbmigrate.Option{dbmigrate.WithLogger(log), dbmigrate.WithLockTimeout(lockTimeout)}
	switch action {
	case "up":
		start := time.Now()
		if err := dbmigrate.Up(ctx, db.DB, opts...); err != nil {
			return fail("up failed", err)
		}
		log.InfoContext(ctx, "migrate: database is up to date", "duration_seconds", time.Since(start).Seconds())
	case "down":
		if err := dbmigrate.Down(ctx, db.DB, opts...); err != nil {
			return fail("down failed", err)
		}
		log.InfoContext(ctx, "migrate: rolled back one migration")
	case "status":
		st, err := dbmigrate.Status(ctx, db.DB, opts...)
		if err != nil {
			return fail("status failed", err)
		}
		for _, s := range st {
			state, at := "pending", "-"
			if s.Applied {
				state, at = "applied", s.AppliedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(e.stdout, "%05d  %-7s  %-20s  %s\n", s.Version, state, at, s.Source)
		}
	}
	return exitOK
}

// parseMigrateFlags parses the flags and the one action of `idemguard
// migrate`; ok is false with the exit status when they are bad.
func parseMigrateFlags(e env, args []string) (dsn, action string, lockTimeout time.Duration, code int, ok bool) {
	fs := newFlagSet(e, "migrate", migrateUsage)
	dsnFlag := fs.String("dsn", "", "MySQL DSN, user:password@tcp(host:3306)/dbname (default $"+EnvMySQLDSN+")")
	lockFlag := fs.Duration("lock-timeout", dbmigrate.LockTimeout, "how long to wait for another replica's migration")

	// Flags may come before or after the action: migrate --dsn X up, migrate up --dsn X.
	var positional []string
	for {
		if code, ok := parseFlags(fs, args); !ok {
			return "", "", 0, code, false
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) != 1 {
		fmt.Fprintf(e.stderr, "idemguard migrate: want exactly one action (up, down or status), got %d: %s\n",
			len(positional), strings.Join(positional, " "))
		fs.Usage()
		return "", "", 0, exitUsage, false
	}
	switch action = positional[0]; action {
	case "up", "down", "status":
	default:
		fmt.Fprintf(e.stderr, "idemguard migrate: unknown action %q; want up, down or status\n", action)
		fs.Usage()
		return "", "", 0, exitUsage, false
	}
	if *lockFlag <= 0 {
		fmt.Fprintf(e.stderr, "idemguard migrate: --lock-timeout must be positive, got %s\n", *lockFlag)
		return "", "", 0, exitUsage, false
	}
	return *dsnFlag, action, *lockFlag, 0, true
}
