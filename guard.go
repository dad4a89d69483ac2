package idemguard

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/internal/live"
	"github.com/idemguard/idemguard/internal/testhooks"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/tenancy"
)

// Guard runs operations at most once per (tenant, scope, key). It is safe for
// concurrent use.
type Guard struct {
	cfg      Config
	store    store.Store
	deriver  *keys.Deriver
	log      *slog.Logger
	cache    *replayCache
	policy   sanitize.Policy // the size limit of a stored envelope
	now      func() time.Time
	lifetime context.Context
	shutdown context.CancelFunc
	mu       sync.Mutex // guards closed and inflight.Add against Close's Wait
	closed   bool
	inflight sync.WaitGroup
	dropped  droppedNames // field names the allowlist dropped, logged once
	// background counts releaseLater goroutines; they are started only by
	// calls in flight, so Close waits for them after inflight.
	background sync.WaitGroup
	// readFirst is the adaptive read-first state (readfirst.go).
	readFirst hitRates
	// observerPanics holds the event kinds whose Observe panic was logged.
	observerPanics sync.Map
	// jobs are the operations Start runs in the background (async.go).
	jobs *jobState
	// previous are the derivers of Config.PreviousSecrets (secrets.go).
	previous []previousSecret
	// hub holds the live logs of streams running here and counts waiters (stream.go).
	hub *live.Hub
	// liveStreams counts the streams that may run here (Config.MaxLiveStreams, resume.go).
	liveStreams atomic.Int64
	// audit is the audit trail's state (audittrail.go); nil when it is off.
	audit *auditor
	// deadline is the deadline store writes share (writeCtx, deadline.go).
	deadline sharedDeadline
	// running are the operations Close cancels (running.go).
	running runningOps
}

// New validates cfg and returns a Guard.
func New(cfg Config) (*Guard, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d, err := keys.New(cfg.Secret)
	if err != nil {
		return nil, err
	}
	previous, err := newPreviousSecrets(cfg.PreviousSecrets)
	if err != nil {
		return nil, err
	}
	cfg.MaxWait = cmp.Or(cfg.MaxWait, DefaultMaxWait)
	cfg.StoreTimeout = cmp.Or(cfg.StoreTimeout, DefaultStoreTimeout)
	cfg.ReplayCacheMaxAge = cmp.Or(cfg.ReplayCacheMaxAge, DefaultReplayCacheMaxAge)
	processClock := cfg.test.Now == nil
	if processClock {
		cfg.test.Now = time.Now
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	if cfg.ReplayCacheSize == 0 {
		cfg.ReplayCacheSize = DefaultReplayCacheSize
	}
	cfg.ReplayCacheBytes = cmp.Or(cfg.ReplayCacheBytes, DefaultReplayCacheBytes)
	cfg.ReplayCacheTenantBytes = cmp.Or(cfg.ReplayCacheTenantBytes, cfg.ReplayCacheBytes/2)
	lifetime, shutdown := context.WithCancel(context.Background())
	g := &Guard{
		cfg:      cfg,
		store:    cfg.Store,
		deriver:  d,
		log:      cfg.Logger,
		cache:    newReplayCache(cfg.ReplayCacheSize, cfg.ReplayCacheBytes, cfg.ReplayCacheTenantBytes),
		now:      cfg.test.Now,
		policy:   sanitize.Policy{MaxBytes: cmp.Or(cfg.MaxResponseBytes, sanitize.DefaultMaxBytes)},
		lifetime: lifetime,
		shutdown: shutdown,
		jobs:     newJobState(cfg),
		previous: previous,
		hub:      live.NewHub(live.Config{MaxBytes: cmp.Or(cfg.MaxStreamBytes, DefaultMaxStreamBytes), MaxPerKey: cmp.Or(cfg.MaxWaiters, DefaultMaxWaiters)}),
		audit:    newAuditor(cfg.Audit, processClock),
	}
	g.running.watch(lifetime)
	g.startAuditWriter()
	return g, nil
}

// Close cancels the context of every operation still running (cause
// ErrShuttingDown) and waits until they have recorded their outcome or ctx
// ends. A cut-off operation is stored as failed: stopReason timeout (retryable)
// under StaleTakeover, abandoned (final) under StaleFail. Call Close after the
// grace period in which running operations were allowed to finish. Calls
// waiting for a duplicate answer in_progress at once, and calls made after
// Close return a StoreError wrapping ErrShuttingDown (errors.Is
// ErrStoreUnavailable: retry elsewhere) without claiming anything.
func (g *Guard) Close(ctx context.Context) error {
	// Cancel first, then refuse new calls: a call that sees the Guard
	// closed knows every operation has been told to stop.
	g.shutdown()
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	done := make(chan struct{})
	go func() { g.inflight.Wait(); g.jobs.wg.Wait(); g.background.Wait(); close(done) }()
	select {
	case <-done:
		return g.stopAudit(ctx) // the batched audit events still queued
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ping reports whether the store answers (readiness).
func (g *Guard) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.StoreTimeout)
	defer cancel()
	if err := g.store.Ping(ctx); err != nil {
		return &StoreError{Op: "ping", Err: err}
	}
	return nil
}

// enter counts a call in flight unless the Guard is closed.
func (g *Guard) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.inflight.Add(1)
	return true
}

// prepared is a validated Call.
type prepared struct {
	tenant      string
	principal   string // Call.Principal: part of the key hash only
	scope       string
	keyHash     string
	fingerprint string
	hasKey      bool
	keep        *sanitize.Allowlist
	check       func() error
	admit       func(string) (func(), error)
	settings    Settings
	wait        time.Duration
	timeout     time.Duration
	detach      bool
	// noCache and noReadFirst skip the replay cache and the read before the
	// claim for a delivery that cannot use them (delivery.setup).
	noCache, noReadFirst bool
	// follow: follow a running execution in this process (attach) even
	// without a wait (a stream that resumes).
	follow bool
	// secretID names the secret of keyHash and fingerprint; versions is the
	// request under every configured secret, the current one first, or nil
	// without previous secrets (secrets.go).
	secretID string
	versions []keyVersion
	delivery delivery // how the answer reaches the caller (delivery.go)
	actor    string   // Call.Actor, or the context's (audit trail)
	// force: Call.ForceNew (reset.go); the replay cache and the read
	// before the claim are skipped, and a running key is answered at once.
	force bool
}

func (g *Guard) prepare(ctx context.Context, c Call) (prepared, error) {
	if _, err := tenancy.ParseID(string(c.Tenant)); err != nil {
		return prepared{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if err := keys.ValidateScope(c.Scope); err != nil {
		return prepared{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if c.ClientKey != "" {
		if err := keys.ValidateClientKey(c.ClientKey); err != nil {
			return prepared{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
	}
	if err := c.Settings.Validate(); err != nil {
		return prepared{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if err := validActor(c.Actor); err != nil {
		return prepared{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	if err := validPrincipal(c.Principal); err != nil {
		return prepared{}, err
	}
	if c.Wait < 0 || c.Timeout < 0 {
		return prepared{}, fmt.Errorf("%w: Wait and Timeout must not be negative", ErrInvalidInput)
	}
	canonical, err := keys.CanonicalizeValue(c.Inputs)
	if err != nil {
		return prepared{}, fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	p := prepared{
		tenant:      string(c.Tenant),
		scope:       c.Scope,
		principal:   c.Principal,
		keyHash:     g.deriver.PrincipalKeyHash(string(c.Tenant), c.Scope, c.Principal, c.ClientKey, canonical),
		fingerprint: g.deriver.Fingerprint(canonical),
		hasKey:      c.ClientKey != "",
		keep:        c.Keep,
		check:       c.Check,
		admit:       c.Admit,
		settings:    c.Settings.withDefaults(g.cfg.Defaults),
		wait:        min(c.Wait, g.cfg.MaxWait),
		timeout:     c.Timeout,
		detach:      c.Detach,
		secretID:    g.cfg.SecretID,
		actor:       c.Actor,
	}
	if c.ForceNew {
		if err := forcing(&p, c); err != nil {
			return prepared{}, err
		}
	}
	if p.actor == "" && g.audit != nil {
		p.actor = ActorFrom(ctx)
		if err := validActor(p.actor); err != nil {
			return prepared{}, fmt.Errorf("%w: the context's actor (WithActor): %w", ErrInvalidInput, err)
		}
	}
	p.versions = g.versionsOf(p, c.ClientKey, canonical) // previous secrets: secrets.go
	return p, nil
}

// Do runs op at most once for (call.Tenant, call.Scope, key) and answers
// every duplicate with the stored result: a success is replayed with Cached
// true; a duplicate of a running call gets StatusInProgress (or waits,
// Call.Wait); a failure is retried while attempts remain.
//
// It returns an error only for invalid input (ErrInvalidInput), a reused
// client key with other inputs (ErrFingerprintMismatch), store failure
// (*StoreError, ErrStoreUnavailable: op did not start) and a result that is
// not a JSON object (ErrInvalidResult, returned with the Result of the stored
// failure), and Call.Check's own error. An operation's failure is a Result
// with Status StatusFailed.
//
// WithIdempotency is the same call under the name the product's
// documentation uses.
func (g *Guard) Do(ctx context.Context, call Call, op Operation) (Result, error) {
	if op == nil {
		return Result{}, fmt.Errorf("%w: operation is nil", ErrInvalidInput)
	}
	return g.call(ctx, call, plain{op: op})
}

// WithIdempotency is Do under the name the product's documentation uses
// ("a backend router calls WithIdempotency"): the same call, with the same
// arguments, results and errors.
func (g *Guard) WithIdempotency(ctx context.Context, call Call, op Operation) (Result, error) {
	return g.Do(ctx, call, op)
}

// HashUserText is what Call.Inputs hold in place of raw user text: the hex
// SHA-256 of s trimmed, with every run of white space collapsed to one
// space. Raw text never enters a key, a fingerprint, the store or a log.
func HashUserText(s string) string { return keys.HashUserText(s) }

// Store calls. Each is bounded by StoreTimeout. Every write runs detached
// from the caller's cancellation: a write whose caller hung up may still
// land, and then only a re-read of the row can tell what happened
// (decide by the row, never by the error): writeCtx gives a write its
// context. Reads follow the caller's context, except those that settle a
// write's outcome.

func (g *Guard) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, g.cfg.StoreTimeout)
}

func (g *Guard) storeErr(ctx context.Context, p prepared, op string, err error) error {
	var se *StoreError
	if errors.As(err, &se) {
		return err
	}
	if ctx.Err() != nil {
		// The caller gave up; not the store's failure, so no alarm.
		return &StoreError{Op: op, Err: err}
	}
	g.emit(Event{Kind: EventStoreError, Scope: p.scope, StoreOp: op})
	g.log.Error("guard: store call failed", g.attrs(p, slog.String("op", op), slog.Any("err", err))...)
	return &StoreError{Op: op, Err: err}
}

// defect reports whether the test knob Defect puts d back (internal/sim).
func (g *Guard) defect(d testhooks.Defect) bool { return g.cfg.test.Defect == d }

// emit reports e to Config.Observe. An observer that panics never breaks
// the protocol (a claim left started would run the operation again after
// staleAfter): the panic is recovered and logged once per event kind.
func (g *Guard) emit(e Event) {
	if g.cfg.Observe == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			if _, logged := g.observerPanics.LoadOrStore(e.Kind, true); !logged {
				g.log.Error("guard: Config.Observe panicked; the event is lost, the call goes on (logged once per event kind)",
					slog.String("event", string(e.Kind)), slog.String("scope", e.Scope),
					slog.String("panic_type", fmt.Sprintf("%T", r)), slog.String("stack", string(debug.Stack())))
			}
		}
	}()
	g.cfg.Observe(e)
}

// attrs are the identifying log attributes of a call: never the client key
// or inputs, and only a prefix of the key hash.
func (g *Guard) attrs(p prepared, extra ...any) []any {
	return append([]any{slog.String("tenant", p.tenant), slog.String("scope", p.scope),
		slog.String("key_hash", shortHash(p.keyHash))}, extra...)
}

// shortHash is the prefix of a key hash that logs carry.
func shortHash(h string) string { return h[:min(12, len(h))] }

func newNonce() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// backoff yields polling intervals for a bounded wait: from 20ms, growing by
// half each time, capped at a quarter of staleAfter and at one second.
type backoff struct {
	cur, max time.Duration
}

func newBackoff(staleAfter time.Duration) backoff {
	return backoff{cur: 20 * time.Millisecond, max: min(time.Second, max(staleAfter/4, 20*time.Millisecond))}
}

func (b *backoff) next() time.Duration {
	d := jitter(b.cur)
	b.cur = min(b.cur+b.cur/2, b.max)
	return d
}
