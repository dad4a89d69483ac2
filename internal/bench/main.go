// Command bench measures what the guard costs over the least SQL the
// protocol needs, against a real MySQL/MariaDB, in one run (`make bench`, or
// `go run ./internal/bench`). See docs/BENCHMARKS.md for what is measured
// and why, and suites.go for how to add a suite.
//
// The server comes from IDEMGUARD_BENCH_MYSQL_DSN, else
// IDEMGUARD_TEST_MYSQL_DSN: a user allowed to CREATE and DROP DATABASE. The
// program creates a fresh database idemguard_bench_<hex>, migrates it, runs
// the suites, prints a table and drops the database. Exit status: 0 done,
// 1 runtime failure (no DSN, server unreachable, a measured call failed),
// 2 bad flags.
package main

import (
	"context"
	crand "crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemguard/idemguard/internal/dbmigrate"
	"github.com/idemguard/idemguard/internal/mysqlconn"
)

// Environment variables naming the server, in the order they are read.
const (
	EnvDSN     = "IDEMGUARD_BENCH_MYSQL_DSN"
	EnvTestDSN = "IDEMGUARD_TEST_MYSQL_DSN"
)

// dbPrefix starts the name of every bench database.
const dbPrefix = "idemguard_bench_"

// setupTimeout bounds creating, migrating and dropping the bench database.
const setupTimeout = time.Minute

func main() {
	if os.Getenv(envFloor) == "1" {
		// Re-executed by the http suite as its floor server (httpfloor.go).
		os.Exit(runHTTPFloor(os.Getenv, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage marks a flag error (exit 2).
var errUsage = errors.New("usage")

type flags struct {
	opts       options
	suites     string
	list       bool
	ping       bool
	cpuprofile string
	pgo        string
	phases     bool
	verbose    bool
}

func parseFlags(args []string, stderr io.Writer) (flags, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./internal/bench [flags]\n\n"+
			"Measures Do against the raw SQL floor on the MySQL in %s (else %s).\n\n", EnvDSN, EnvTestDSN)
		fs.PrintDefaults()
	}
	var f flags
	var conc string
	quick := fs.Bool("quick", false, "smoke run: -duration 1s -rounds 3 -warmup 250ms")
	fs.DurationVar(&f.opts.duration, "duration", 6*time.Second, "measured time of each case at each concurrency, split into -rounds rounds")
	fs.DurationVar(&f.opts.warmup, "warmup", time.Second, "unmeasured run of each case before its rounds")
	fs.IntVar(&f.opts.rounds, "rounds", 6, "rounds per case, interleaved with the other cases of its suite; the median round is reported")
	fs.StringVar(&conc, "concurrency", "1,16", "comma-separated worker counts")
	fs.IntVar(&f.opts.pool, "pool", mysqlconn.DefaultMaxOpenConns, "MaxOpenConns of the pool (raw and guarded cases share it)")
	fs.StringVar(&f.suites, "suite", "", "comma-separated suites to run (default all; see -list)")
	fs.BoolVar(&f.list, "list", false, "list the suites and exit")
	fs.BoolVar(&f.ping, "ping", false, "only check that the server is reachable, and exit")
	fs.StringVar(&f.cpuprofile, "cpuprofile", "", "write a CPU profile of the measured suites to this file")
	fs.StringVar(&f.pgo, "pgo", "", "record the CPU profile of every serve process the suites start (a profiling build of serve) and write their merge to this file: cmd/idemguard/default.pgo (make pgo)")
	fs.BoolVar(&f.phases, "stream-phases", false, "after the stream suite's c=1 rounds, trace the goroutine serving serve-stream and floor-stream-claimed and note where the first event waits (the profiling build: go run -tags idemguard_pprof ./internal/bench)")
	fs.BoolVar(&f.verbose, "v", false, "log every round")
	fs.StringVar(&f.opts.httpCases, "http-cases", "fresh,replay,storm", "the http suite's groups to run (comma-separated: fresh, replay, storm)")
	if err := fs.Parse(args); err != nil {
		return flags{}, errUsage
	}
	if fs.NArg() > 0 {
		return flags{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *quick {
		f.opts.duration, f.opts.rounds, f.opts.warmup = time.Second, 3, 250*time.Millisecond
	}
	levels, err := parseConcurrency(conc)
	if err != nil {
		return flags{}, err
	}
	f.opts.concurrency = levels
	switch {
	case f.opts.duration <= 0:
		return flags{}, fmt.Errorf("-duration must be positive, got %s", f.opts.duration)
	case f.opts.warmup < 0:
		return flags{}, fmt.Errorf("-warmup must not be negative, got %s", f.opts.warmup)
	case f.opts.rounds < 1:
		return flags{}, fmt.Errorf("-rounds must be at least 1, got %d", f.opts.rounds)
	case f.opts.roundDuration() < 10*time.Millisecond:
		return flags{}, fmt.Errorf("-duration %s split into %d rounds gives rounds shorter than 10ms", f.opts.duration, f.opts.rounds)
	case f.opts.pool < 1:
		return flags{}, fmt.Errorf("-pool must be at least 1, got %d", f.opts.pool)
	case f.phases && !profilingBuild:
		return flags{}, errors.New("-stream-phases reads the processes' runtime traces: run the profiling build, go run -tags idemguard_pprof ./internal/bench")
	case f.phases && !slices.Contains(f.opts.concurrency, 1):
		return flags{}, errors.New("-stream-phases traces at concurrency 1: include 1 in -concurrency")
	}
	for g := range strings.SplitSeq(f.opts.httpCases, ",") {
		if g = strings.TrimSpace(g); g != "fresh" && g != "replay" && g != "storm" {
			return flags{}, fmt.Errorf("-http-cases: %q is not one of fresh, replay, storm", g)
		}
	}
	return f, nil
}

// parseConcurrency parses "1,16" into [1 16].
func parseConcurrency(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 || n > 1024 {
			return nil, fmt.Errorf("-concurrency: %q is not a worker count between 1 and 1024", strings.TrimSpace(part))
		}
		out = append(out, n)
	}
	return out, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(stderr, "bench:", err)
		}
		return 2
	}
	suites, err := selectSuites(registry, f.suites)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	if f.list {
		for _, s := range suites {
			fmt.Fprintf(stdout, "%-10s %s\n", s.name, s.about)
		}
		return 0
	}
	level := slog.LevelInfo
	if f.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	server, source := serverDSN(getenv)
	if server == "" {
		fmt.Fprintf(stderr, "bench: no MySQL server: set %s (or %s) to a DSN for a user that may CREATE and DROP DATABASE, "+
			"e.g. %s='root@tcp(127.0.0.1:3306)/test'\n", EnvDSN, EnvTestDSN, EnvDSN)
		return 1
	}
	if f.ping {
		err = ping(ctx, server, stdout)
	} else {
		err = measure(ctx, f, suites, server, log, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		if errors.Is(err, errUnreachable) {
			fmt.Fprintf(stderr, "bench: is the server running? The DSN came from %s (%s).\n", source, mysqlconn.Redact(server))
		}
		return 1
	}
	return 0
}

// serverDSN returns the configured DSN and the variable it came from.
func serverDSN(getenv func(string) string) (string, string) {
	for _, name := range []string{EnvDSN, EnvTestDSN} {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v, name
		}
	}
	return "", ""
}

var errUnreachable = errors.New("cannot reach the MySQL server")

// ping checks that the server answers.
func ping(ctx context.Context, server string, stdout io.Writer) error {
	serverOnly, err := mysqlconn.WithDatabase(server, "")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	db, err := mysqlconn.Open(ctx, serverOnly, mysqlconn.PoolConfig{MaxOpenConns: 1})
	if err != nil {
		return fmt.Errorf("%w: %w", errUnreachable, err)
	}
	defer db.Close()
	var version string
	if err := db.GetContext(ctx, &version, "SELECT VERSION()"); err != nil {
		return fmt.Errorf("server version: %w", err)
	}
	fmt.Fprintf(stdout, "bench: MySQL %s reachable at %s\n", version, mysqlconn.Redact(serverOnly))
	return nil
}

// measure creates the bench database, runs the suites on it, prints the
// results and drops the database.
func measure(ctx context.Context, f flags, suites []suite, server string, log *slog.Logger, stdout io.Writer) (err error) {
	serverOnly, err := mysqlconn.WithDatabase(server, "")
	if err != nil {
		return err
	}
	name := dbPrefix + randomHex(4)
	dsn, err := mysqlconn.WithDatabase(server, name)
	if err != nil {
		return err
	}

	setup, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	admin, err := mysqlconn.Open(setup, serverOnly, mysqlconn.PoolConfig{MaxOpenConns: 1})
	if err != nil {
		return fmt.Errorf("%w: %w", errUnreachable, err)
	}
	defer admin.Close()
	var version string
	if err := admin.GetContext(setup, &version, "SELECT VERSION()"); err != nil {
		return fmt.Errorf("server version: %w", err)
	}
	if _, err := admin.ExecContext(setup, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	log.Info("bench: created database", slog.String("database", name))
	defer func() {
		// Dropped even after a failure or an interrupt: a context of its own.
		dctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if _, derr := admin.ExecContext(dctx, "DROP DATABASE IF EXISTS `"+name+"`"); derr != nil {
			err = errors.Join(err, fmt.Errorf("drop database %s: %w", name, derr))
			return
		}
		log.Info("bench: dropped database", slog.String("database", name))
	}()

	db, err := mysqlconn.Open(setup, dsn, mysqlconn.PoolConfig{MaxOpenConns: f.opts.pool})
	if err != nil {
		return err
	}
	defer db.Close()
	if err := dbmigrate.Up(setup, db.DB); err != nil {
		return fmt.Errorf("migrate %s: %w", name, err)
	}

	secret := make([]byte, 32)
	_, _ = crand.Read(secret)
	e := &env{log: log, opts: f.opts, db: db, dsn: dsn, secret: secret}
	if f.pgo != "" || f.phases {
		if e.pprofDir, err = os.MkdirTemp("", "idemguard-bench-pprof-"); err != nil {
			return err
		}
		defer os.RemoveAll(e.pprofDir)
		e.recordCPU, e.streamPhases = f.pgo != "", f.phases
	}

	if f.cpuprofile != "" {
		pf, err := os.Create(f.cpuprofile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	started, loadBefore := time.Now(), loadAverage()
	var rows []row
	for _, s := range suites {
		log.Info("bench: suite", slog.String("suite", s.name))
		r, err := s.run(ctx, e)
		if err != nil {
			return fmt.Errorf("suite %s: %w", s.name, err)
		}
		rows = append(rows, r...)
	}
	if f.pgo != "" {
		if err := writePGO(ctx, e.pprofDir, f.pgo); err != nil {
			return err
		}
		log.Info("bench: wrote the profile-guided build's profile", slog.String("file", f.pgo))
	}
	writeHeader(stdout, f.opts, version, loadBefore, time.Since(started))
	writeTable(stdout, rows)
	return nil
}

func writeHeader(w io.Writer, o options, server, loadBefore string, took time.Duration) {
	conc := make([]string, len(o.concurrency))
	for i, c := range o.concurrency {
		conc[i] = strconv.Itoa(c)
	}
	fmt.Fprintf(w, "idemguard bench  %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "go %s %s/%s, %d CPUs (GOMAXPROCS %d); server %s\n", runtime.Version(), runtime.GOOS,
		runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), server)
	fmt.Fprintf(w, "load average (1/5/15 min) at start %s, at end %s\n", loadBefore, loadAverage())
	fmt.Fprintf(w, "each case: warm-up %s, then %d interleaved rounds of %s (median round reported); concurrency %s, pool %d; took %s\n\n",
		o.warmup, o.rounds, o.roundDuration(), strings.Join(conc, ","), o.pool, took.Round(time.Second))
}

// loadAverage is the 1/5/15-minute load from /proc/loadavg, or "n/a".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	fields := strings.Fields(string(b))
	if len(fields) < 3 {
		return "n/a"
	}
	return strings.Join(fields[:3], " ")
}
