// Command idemguard is the idemguard binary: one executable, one subcommand per job.
//
//	idemguard serve [--config FILE]    serve the REST API
//	idemguard migrate up|down|status   apply or inspect the database schema
//	idemguard cleanup [flags]          delete expired keys in batches (daily cron)
//	idemguard stats [--since 24h]      health figures vs alert thresholds (exit 1 on a breach)
//	idemguard health [--url URL]       exit 0 if a running serve answers /healthz (image health check)
//	idemguard version                  version, commit, date, Go version, schema version
//
// main.go only dispatches; each subcommand lives in its own file with its own flag.FlagSet.
// Exit codes: 0 success, 1 runtime failure (database, network), 2 usage error (bad flags, a
// malformed DSN or config); stats alone has its own (see stats.go): 1 threshold breached, 3
// figures unreadable.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/jmoiron/sqlx"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// env is what a subcommand may use from the process: no subcommand reads os.* directly, so
// tests call run with their own writers and environment.
type env struct {
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// logger writes JSON lines to stderr.
	logger *slog.Logger
}

// command is one subcommand. run gets the arguments after the subcommand's name and returns the
// exit code.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e env, args []string) int
}

// commands lists the subcommands in the order usage shows them. Add new ones here.
var commands = []command{
	{name: "migrate", summary: "apply, roll back or list database migrations (up|down|status)", run: runMigrate},
	{name: "cleanup", summary: "delete expired idempotency keys in batches (daily cron)", run: runCleanup},
	{name: "keys", summary: "reset a finished key's stored answer (keys reset), as DELETE of the key does", run: runKeys},
	{name: "stats", summary: "health figures (hit, takeover, failure rates) vs alert thresholds", run: runStats},
	{name: "serve", summary: "serve the REST API (development mode without a config)", run: runServe},
	{name: "health", summary: "ask a running serve for /healthz (the image's health check; exit 1 if not 200)", run: runHealth},
	{name: "version", summary: "print the version, commit, date, Go version and the schema version it expects", run: runVersion},
}

func main() {
	// The MySQL driver's own lines go to the same JSON stream, once for the process (its logger
	// is global and set without a lock, so run, which tests call in parallel, does not do it).
	mysqlconn.LogDriverTo(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	tuneProcessGC = true // serve's garbage-collector settings (serve_gc.go) apply to this process
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	stopProfile()
	os.Exit(code)
}

// stopProfile ends the profiling build's CPU profile (pprof_bench.go); the
// default build records none.
var stopProfile = func() {}

// run dispatches args (without the program name) to a subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	e := env{
		stdout: stdout,
		stderr: stderr,
		getenv: getenv,
		logger: slog.New(slog.NewJSONHandler(stderr, nil)),
	}
	if len(args) == 0 {
		fmt.Fprintln(stderr, "idemguard: missing command")
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout)
		return exitOK
	case "--version", "-version":
		return runVersion(ctx, e, args[1:])
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(ctx, e, args[1:])
		}
	}
	fmt.Fprintf(stderr, "idemguard: unknown command %q\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: idemguard <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'idemguard <command> -h' for the command's flags.")
}

// resolveDSN returns the DSN from the --dsn flag's value or, when that is empty, from
// $IDEMGUARD_MYSQL_DSN. When both are empty, or the DSN does not parse, it prints what to set
// and returns false: the caller exits with exitUsage.
func resolveDSN(e env, cmd, flagValue string) (string, bool) {
	dsn := strings.TrimSpace(flagValue)
	if dsn == "" {
		dsn = strings.TrimSpace(e.getenv(EnvMySQLDSN))
	}
	if dsn == "" {
		fmt.Fprintf(e.stderr, "idemguard %s: no database: pass --dsn or set %s (e.g. user:password@tcp(127.0.0.1:3306)/idemguard)\n", cmd, EnvMySQLDSN)
		return "", false
	}
	// A DSN that does not parse is a usage error (exit 2) in every subcommand, before any
	// connection is tried; serve checks it with the rest of its configuration.
	if _, err := mysqlconn.NormalizeDSN(dsn); err != nil {
		fmt.Fprintf(e.stderr, "idemguard %s: %v\n", cmd, err) // mysqlconn redacts the password
		return "", false
	}
	return dsn, true
}

// openDB resolves the database of subcommand cmd (--dsn, then the environment) and opens a pool
// of at most maxConns. A missing or malformed DSN ends the command with exitUsage, a failed
// connection with failCode; log carries the redacted DSN, and what it logs is named after cmd's
// first word ("stats: connect to database" for `stats secrets` too).
func openDB(ctx context.Context, e env, cmd, dsnFlag string, maxConns, failCode int) (db *sqlx.DB, log *slog.Logger, code int) {
	dsn, ok := resolveDSN(e, cmd, dsnFlag)
	if !ok {
		return nil, nil, exitUsage
	}
	log = e.logger.With("dsn", mysqlconn.Redact(dsn))
	db, err := mysqlconn.Open(ctx, dsn, mysqlconn.PoolConfig{MaxOpenConns: maxConns})
	if err != nil {
		log.ErrorContext(ctx, strings.Fields(cmd)[0]+": connect to database", "err", err)
		return nil, nil, failCode
	}
	return db, log, exitOK
}
