package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/config"
	"github.com/idemguard/idemguard/internal/dbmigrate"
	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/internal/ops"
	"github.com/idemguard/idemguard/internal/reqlog"
	"github.com/idemguard/idemguard/internal/stats"
	"github.com/idemguard/idemguard/mysql"
	"github.com/idemguard/idemguard/routers"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
)

const serveUsage = `usage: idemguard serve [--config FILE]

Serves the REST API (docs/CONFIGURATION.md lists every setting). Settings come
from FILE (or $IDEMGUARD_CONFIG) and environment overrides; without either it
starts in development mode: in-memory store, demo scope, API key dev-demo-key
(demo scopes only). Settings only a deployment has (a database, API keys, JWT
settings, scopes of a real operation) need mode: production (or development)
set explicitly, or serve refuses to start.

flags:
`

// HTTP server limits. Operations may run long (an AI call), so there is no
// write timeout; each operation has its own timeout instead.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = time.Minute
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
	// startTimeout bounds connecting to the database (and, in development
	// mode, migrating it) at start.
	startTimeout = 60 * time.Second
	// drainTimeout is how long the answers of operations cut off at shutdown
	// get to reach their clients.
	drainTimeout = 2 * time.Second
)

// runServe implements `idemguard serve`. It returns when ctx ends (SIGINT,
// SIGTERM) and the shutdown sequence has finished: stop accepting, let
// in-flight requests run for shutdown_grace, cancel the operations still
// running (the guard stores them as failed), close the database.
func runServe(ctx context.Context, e env, args []string) int {
	fs := newFlagSet(e, "serve", serveUsage)
	configPath := fs.String("config", "", "YAML config file (default $"+config.EnvConfig+"; none: defaults and environment only)")
	auditLog := fs.String("audit-log", "", "where the JSON-lines audit stream goes: off, stdout, stderr or a file path (appended, 0600); "+
		"overrides audit.log and $"+config.EnvAuditLog+" (default off)")
	auditTable := fs.Bool("audit-table", true, "write the audit trail to the idempotency_audit table when the store is MySQL; "+
		"overrides audit.table and $"+config.EnvAuditTable)
	if code, ok := parseFlagsOnly(e, fs, args); !ok {
		return code
	}

	cfg, err := config.Load(*configPath, e.getenv)
	if err != nil {
		fmt.Fprintf(e.stderr, "idemguard serve: %v\n", err)
		return exitUsage
	}
	fs.Visit(func(f *flag.Flag) { // a flag given wins over the file and the environment
		switch f.Name {
		case "audit-log":
			cfg.Audit.Log = *auditLog
		case "audit-table":
			cfg.Audit.Table = *auditTable
		}
	})
	if cfg.Audit.Log == "" {
		fmt.Fprintf(e.stderr, "idemguard serve: --audit-log must be off, stdout, stderr or a file path\n")
		return exitUsage
	}
	// From here on serve's lines go through one queue, so the request log
	// costs a request no write(2) of its own; they keep their order. The
	// MySQL driver's rare lines (its logger is global, set in main) are
	// written directly, so one may land ahead of lines still queued.
	lw := newLogWriter(e.stderr)
	defer lw.Close()
	// slog's JSON handler, which also writes the request log's lines
	// without building a record for each (the same bytes).
	e.stderr, e.logger = lw, slog.New(reqlog.NewJSONHandler(lw))
	s := &server{cfg: cfg, log: e.logger, env: e}
	return s.run(ctx)
}

// server is one run of `idemguard serve`.
type server struct {
	cfg *config.Config
	log *slog.Logger
	env env

	db       *sqlx.DB // nil on the in-memory store
	store    store.Store
	migrated atomic.Bool
	// commitErrors counts outcomes the guard could not store.
	commitErrors atomic.Int64
}

func (s *server) run(ctx context.Context) int {
	s.warnAtStart()
	s.tuneGC()
	if err := s.openStore(ctx); err != nil {
		s.log.Error("serve: cannot open the store", "err", err)
		return exitError
	}
	defer s.closeStore()
	s.checkSecretRows(ctx) // secret rotation: serve_secrets.go

	m := metrics.New()
	cost := scopeCost(s.cfg.Scopes)
	// The recorder and the audit stream are closed after the guard: the
	// operations cut off at shutdown still report events, and they are written.
	rec, stopRec, ok := s.startRecorder(cost)
	if !ok {
		return exitError
	}
	defer stopRec()
	audit, stream, err := s.auditConfig(m)
	if err != nil {
		s.log.Error("serve: cannot open the audit stream", "err", err)
		return exitError
	}
	defer s.closeAuditStream(stream)
	guard, err := s.newGuard(m, cost, rec, audit, stream)
	if err != nil {
		s.log.Error("serve: cannot start the guard", "err", err)
		return exitError
	}
	guardClosed := false
	defer func() {
		if !guardClosed {
			_ = guard.Close(context.Background())
		}
	}()
	var code int
	code, guardClosed = s.serveHTTP(ctx, guard, m)
	return code
}

// serveHTTP serves the API and the operator listener with guard until ctx
// ends (a graceful shutdown, which closes the guard: closed) or a listener
// stops.
func (s *server) serveHTTP(ctx context.Context, guard *idemguard.Guard, m *metrics.Metrics) (code int, closed bool) {
	// One transport for every upstream call, keeping enough idle connections
	// that concurrent calls reuse them; closed at the end.
	transport := ops.NewTransport()
	defer transport.CloseIdleConnections()
	handler, names, done, ok := s.handler(guard, m, transport)
	defer done()
	if !ok {
		return exitError, false
	}
	opsSrv, opsAddr, opsServed, ok := s.listenOperator(ctx, m, names)
	if !ok {
		return exitError, false
	}
	defer s.stopOperator(opsSrv)
	srv, served, ok := s.listen(ctx, handler, names, opsAddr)
	if !ok {
		return exitError, false
	}
	select {
	case err := <-served:
		s.log.Error("serve: the HTTP server stopped", "err", err)
		return exitError, false
	case err := <-opsServed:
		s.log.Error("serve: the operator listener stopped", "err", err)
		return exitError, false
	case <-ctx.Done():
	}
	return s.shutdown(srv, guard), true
}

// warnAtStart logs what a configuration that starts may still get wrong.
func (s *server) warnAtStart() {
	if s.cfg.SecretGenerated {
		s.log.Warn("serve: " + config.EnvSecret + " is not set; using a random secret for this process (development mode): " +
			"derived keys will not match after a restart, and replicas would not agree")
	}
	if s.cfg.Mode == config.Production && len(s.cfg.Scopes) == 0 {
		s.log.Warn("serve: production mode with no scopes configured: every POST /v1/ops/{scope} answers 404 " +
			"until the config file lists scopes (docs/CONFIGURATION.md)")
	}
}

// startRecorder starts, on MySQL, the recorder that sends replay counts to
// idempotency_stats for `idemguard stats` (the replay path itself stays
// read-only: see internal/stats); nil on the in-memory store. stop ends it
// after its final flush. ok is false, logged, when it could not start.
func (s *server) startRecorder(cost func(string, idemguard.Usage) float64) (rec *stats.Recorder, stop func(), ok bool) {
	if s.db == nil {
		return nil, func() {}, true
	}
	rec, err := stats.NewRecorder(s.db, stats.RecorderOptions{Logger: s.log, Cost: cost})
	if err != nil {
		s.log.Error("serve: cannot start the stats recorder", "err", err)
		return nil, nil, false
	}
	recCtx, stopRec := context.WithCancel(context.Background())
	recDone := make(chan struct{})
	go func() { defer close(recDone); _ = rec.Run(recCtx) }()
	return rec, func() { stopRec(); <-recDone }, true
}

// closeAuditStream closes the audit stream, if there is one.
func (s *server) closeAuditStream(stream *auditStream) {
	if stream == nil {
		return
	}
	if err := stream.Close(); err != nil {
		s.log.Warn("serve: closing the audit stream", "err", err)
	}
}

// newGuard builds the guard on the open store; its events feed the
// metrics m, the avoided-cost figures and the stats recorder rec.
func (s *server) newGuard(m *metrics.Metrics, cost func(string, idemguard.Usage) float64, rec *stats.Recorder,
	audit idemguard.AuditConfig, stream *auditStream) (*idemguard.Guard, error) {
	cfg := s.cfg
	observe := func(ev idemguard.Event) {
		m.Observe(ev)
		stream.observeEvent(ev) // the audit decisions, when audit.log is on
		creditAvoided(m, cost, ev)
		if rec != nil {
			rec.Observe(ev)
		}
		if ev.Kind == idemguard.EventStoreError && ev.StoreOp == "commit" {
			s.commitErrors.Add(1)
		}
	}
	return idemguard.New(idemguard.Config{
		Store:                  s.store,
		Secret:                 cfg.Secret,
		SecretID:               cfg.SecretID,
		PreviousSecrets:        cfg.PreviousSecrets,
		Logger:                 s.log,
		Observe:                observe,
		Defaults:               cfg.Defaults,
		MaxWait:                cfg.MaxWait,
		MaxWaiters:             cfg.MaxWaiters,
		StoreTimeout:           cfg.StoreTimeout,
		ReplayCacheSize:        cfg.ReplayCacheSize,
		ReplayCacheMaxAge:      cfg.ReplayCacheMaxAge,
		Audit:                  audit,
		MaxLiveStreams:         cfg.MaxLiveStreams,
		ReplayCacheBytes:       cfg.ReplayCacheBytes,
		ReplayCacheTenantBytes: cfg.ReplayCacheTenantBytes,
	})
}

// handler builds the HTTP API over guard: the operations (their upstream
// calls through transport), authentication, the operator page and the
// browser options. done stops what it started (the store probe, the JWT
// verifier), also when ok is false; a false ok is logged.
func (s *server) handler(guard *idemguard.Guard, m *metrics.Metrics, transport *http.Transport) (
	h http.Handler, names []string, done func(), ok bool) {
	cfg, log := s.cfg, s.log
	var undo []func()
	done = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	registry, err := ops.FromConfig(cfg, &http.Client{Transport: transport}, guard.HashActor)
	if err != nil {
		log.Error("serve: cannot build the operations", "err", err)
		return nil, nil, done, false
	}
	m.InitScopes(registry.Names()...) // every series exported from the start, at zero
	undo = append(undo, s.probeStore(m, guard))
	auth, err := s.authenticator()
	if err != nil {
		log.Error("serve: invalid API keys", "err", err)
		return nil, nil, done, false
	}
	opts := routers.Options{
		Guard:                 guard,
		Scopes:                routerScopes(registry),
		Auth:                  auth,
		Ready:                 s.ready(guard),
		MaxBodyBytes:          cfg.MaxBodyBytes,
		MaxWait:               cfg.MaxWait,
		RetryAfter:            cfg.RetryAfter,
		UnavailableRetryAfter: cfg.UnavailableRetryAfter,
		CORSOrigins:           cfg.CORSOrigins,
		Logger:                log,
		HTTPMetrics:           m,
		AuthFailures: routers.AuthFailureLimit{Max: cfg.AuthFailures.Max, Window: cfg.AuthFailures.Window,
			MaxClients: cfg.AuthFailures.MaxClients, OnLimited: m.AuthLimited},
		Limits:  limitOptions(cfg, m),
		MCPPath: cfg.MCP.Path,
		Doors:   routerDoors(cfg.Doors),
	}
	s.opsOptions(&opts, registry.Names())
	jwtVerifier, err := browserOptions(cfg, log, &opts)
	if err != nil {
		log.Error("serve: invalid JWT settings", "err", err)
		return nil, nil, done, false
	}
	if jwtVerifier != nil {
		undo = append(undo, jwtVerifier.Close)
	}
	if h, err = routers.New(opts); err != nil {
		log.Error("serve: cannot build the HTTP API", "err", err)
		return nil, nil, done, false
	}
	return h, registry.Names(), done, true
}

// listen starts serving handler on the configured address; served reports
// the server's end. ok is false, logged, when it cannot listen. opsAddr,
// the operator listener's address ("" when off), goes into the listening
// line.
func (s *server) listen(ctx context.Context, handler http.Handler, names []string, opsAddr string) (
	srv *http.Server, served chan error, ok bool) {
	cfg, log := s.cfg, s.log
	srv, served, ln, ok := s.serveOn(ctx, "listen", cfg.Listen, handler)
	if !ok {
		return nil, nil, false
	}

	addr := ln.Addr().String()
	// The banner comes before the listening line, which is the signal that serve is ready:
	// whoever waits for it (a test, a supervisor's log watch) finds the banner written.
	if cfg.Mode == config.Development {
		_, refused := demoKeyRefusal(cfg)
		fmt.Fprint(s.env.stderr, devBanner(addr, cfg.DevelopmentWithoutDatabase(), refused))
		if opsAddr != "" {
			fmt.Fprintf(s.env.stderr, "Operator page and metrics (no credential; keep this listener private): http://%s/ops, http://%s/metrics\n", opsAddr, opsAddr)
		}
	}
	log.Info("serve: listening", "addr", addr, "operator_addr", opsAddr, "mode", string(cfg.Mode), "store", s.storeName(),
		"scopes", names, "config", cfg.Source)
	return srv, served, true
}

// serveOn starts an HTTP server of handler on addr (the setting's value);
// served reports its end. ok is false, logged, when it cannot listen.
func (s *server) serveOn(ctx context.Context, setting, addr string, handler http.Handler) (
	srv *http.Server, served chan error, ln net.Listener, ok bool) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		s.log.Error("serve: cannot listen", setting, addr, "err", err)
		return nil, nil, nil, false
	}
	srv = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	served = make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return srv, served, ln, true
}

// shutdown stops srv and closes guard, in the order that loses no stored
// outcome, and returns the exit code.
func (s *server) shutdown(srv *http.Server, guard *idemguard.Guard) int {
	cfg, log := s.cfg, s.log
	// A second SIGINT or SIGTERM during the shutdown below stops the process at once
	// (the default action); rows of operations cut off that way are taken over once stale.
	signal.Reset(os.Interrupt, syscall.SIGTERM)

	// 1. Stop accepting; in-flight requests get shutdown_grace to finish.
	log.Info("serve: shutting down; in-flight requests may finish", "grace_seconds", cfg.ShutdownGrace.Seconds())
	lostBefore := s.commitErrors.Load()
	graceCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	// Background jobs (Prefer: respond-async) get the same grace; no new
	// ones are accepted, and open event streams end (their clients resume
	// on another replica).
	jobsDone := make(chan error, 1)
	go func() { jobsDone <- guard.WaitJobs(graceCtx) }()
	err := srv.Shutdown(graceCtx)
	if jobsErr := <-jobsDone; err == nil {
		err = jobsErr
	}
	cancel()
	code := exitOK
	if err != nil {
		log.Warn("serve: grace period over; cutting off the operations still running")
	}
	// 2. Cut off what still runs: the guard cancels each operation and
	//    stores it as failed (stopReason timeout, retryable; abandoned under
	//    stale_policy fail), then waits until every outcome is recorded.
	closeCtx, cancel := context.WithTimeout(context.Background(), 4*cfg.StoreTimeout+5*time.Second)
	err = guard.Close(closeCtx)
	cancel()
	if lost := s.commitErrors.Load() - lostBefore; err != nil || lost > 0 {
		log.Error("serve: outcomes of operations finished or cut off during shutdown could not all be stored; "+
			"their rows stay started and are taken over once stale", "unstored", lost, "err", err)
		code = exitError
	}
	// 3. Let those requests send their answers, then close what is left.
	drainCtx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	if err := srv.Shutdown(drainCtx); err != nil {
		_ = srv.Close()
	}
	cancel()
	// 4. The deferred closeStore closes the database.
	log.Info("serve: stopped")
	return code
}

func (s *server) storeName() string {
	if s.db == nil {
		return "memory"
	}
	return "mysql"
}

// openStore opens MySQL when a DSN is set, else the in-memory store (only
// development mode gets here without a DSN: config refuses it otherwise).
func (s *server) openStore(ctx context.Context) error {
	cfg, log := s.cfg, s.log
	if cfg.MySQLDSN == "" {
		log.Warn("serve: no database configured; using the in-memory store (development mode): " +
			"nothing survives a restart and replicas do not share keys")
		s.store = memstore.New()
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	db, err := mysqlconn.Open(ctx, cfg.MySQLDSN, cfg.Pool)
	if err != nil {
		return err // mysqlconn redacts the password
	}
	s.db, s.store = db, mysql.NewStore(db.DB)
	dblog := log.With("dsn", mysqlconn.Redact(cfg.MySQLDSN))
	if cfg.Mode == config.Development {
		// Development only: production never migrates implicitly (run
		// `idemguard migrate up` as a deploy step).
		if err := dbmigrate.Up(ctx, db.DB, dbmigrate.WithLogger(dblog)); err != nil {
			return fmt.Errorf("development mode: migrating the database: %w", err)
		}
		dblog.Info("serve: development mode: database migrated")
		return nil
	}
	pending, err := dbmigrate.Pending(ctx, db.DB)
	switch {
	case err != nil:
		dblog.Warn("serve: cannot tell whether migrations are pending", "err", err)
	case pending:
		dblog.Warn("serve: database migrations are pending; /readyz answers 503 until `idemguard migrate up` has run")
	default:
		dblog.Info("serve: database connected; schema up to date")
	}
	return nil
}

func (s *server) closeStore() {
	if s.db != nil {
		if err := s.db.Close(); err != nil {
			s.log.Warn("serve: closing the database", "err", err)
		}
	}
}

// ready is /readyz: the store answers and, on MySQL, no migration is
// pending (checked until it first succeeds; migrations are not undone
// under a running service).
func (s *server) ready(guard *idemguard.Guard) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := guard.Ping(ctx); err != nil {
			return err
		}
		if s.db == nil || s.migrated.Load() {
			return nil
		}
		pending, err := dbmigrate.Pending(ctx, s.db.DB)
		if err != nil {
			return fmt.Errorf("checking migrations: %w", err)
		}
		if pending {
			return errors.New("database migrations are pending: run `idemguard migrate up`")
		}
		s.migrated.Store(true)
		return nil
	}
}

// devBanner is what development mode prints on stderr after it starts
// listening: the demo key and the quick start, ready to paste; or, when the
// demo key is refused (refused says why), only that, so the banner never
// advertises a key that does not work.
func devBanner(addr string, inMemory bool, refused string) string {
	var b strings.Builder
	b.WriteString("\nidemguard is running in development mode")
	if inMemory {
		b.WriteString(" (in-memory store: nothing is kept across restarts)")
	}
	if refused != "" {
		b.WriteString(".\nThe public demo key is not accepted: " + refused + ".\n")
		return b.String()
	}
	fmt.Fprintf(&b, ".\nDemo tenant %q, API key: %s (accepted only in development mode).\n", config.DemoTenant, config.DemoAPIKey)
	fmt.Fprintf(&b, "The %q scope simulates a slow model call. Try it:\n\n", config.DemoScope)
	b.WriteString(QuickStart(addr))
	b.WriteString("\n" + pageNote(addr) + "\n")
	return b.String()
}

// QuickStart returns the quick-start shell commands against addr. The block
// between the quickstart markers of docs/CONFIGURATION.md is
// QuickStart("127.0.0.1:8080") (a test checks it), and the integration test
// runs that block.
func QuickStart(addr string) string {
	url := "http://" + addr + "/v1/ops/" + config.DemoScope
	call := func(opts, key, tail string) string {
		return "curl -sS " + opts + " " + url + " -H 'Authorization: Bearer " + config.DemoAPIKey + "' \\\n" +
			"  -H \"Idempotency-Key: " + key + "\" -H 'Content-Type: application/json' -d \"$BODY\"" + tail + "\n"
	}
	return `KEY="quickstart-$(date +%s)"
BODY='{"messages":[{"role":"user","content":"Write a haiku about retries"}]}'

# 1. A fresh call: the demo operation takes 3 s, then 200 with the envelope.
` + call("-i -w '\\n'", "$KEY", "") + `
# 2. The same request again: an instant replay with "cached":true and Idempotent-Replayed: true.
` + call("-i -w '\\n'", "$KEY", "") + `
# 3. A duplicate while the first call still runs: 409 with Retry-After.
` + call("-o /dev/null", "$KEY-busy", " &") + `sleep 1
` + call("-i -w '\\n'", "$KEY-busy", "") + `wait
`
}

// authenticator holds the configured API keys and, in development mode,
// the public demo key: for the demo tenant on the demo scopes only, and
// never added to a configured tenant of that name.
func (s *server) authenticator() (*auth.Authenticator, error) {
	cfg := s.cfg
	a, err := auth.NewAuthenticator(cfg.APIKeys)
	if err != nil || cfg.Mode != config.Development {
		return a, err
	}
	scopes, refused := demoKeyRefusal(cfg)
	switch {
	case len(cfg.APIKeys[config.DemoTenant]) > 0:
		s.log.Warn("serve: tenant " + string(config.DemoTenant) + " is configured with its own API keys: " +
			"the public demo key is not added to it")
		return a, nil
	case refused != "":
		return a, nil
	}
	return a.WithScopedKey(config.DemoTenant, "demo", auth.HashAPIKey(config.DemoAPIKey), scopes)
}

// demoKeyRefusal returns the scopes the public demo key opens in development
// mode, or why it opens none: the authenticator and the banner decide by it.
func demoKeyRefusal(cfg *config.Config) (scopes []string, refused string) {
	scopes = cfg.DemoScopes()
	switch {
	case len(cfg.APIKeys[config.DemoTenant]) > 0:
		return nil, "tenant " + string(config.DemoTenant) + " is configured with its own API keys"
	case len(scopes) == 0:
		return nil, "no demo scope is configured"
	}
	return scopes, ""
}
