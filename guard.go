package idemguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemguard/idemguard/internal/engine"
	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/tenancy"
)

// Config configures a Guard.
type Config struct {
	// Store holds the idempotency records. Required.
	Store Store
	// Secret keys every HMAC of keys and fingerprints; at least 32 bytes.
	// Required. Every process sharing a store must use the same secret.
	Secret []byte
	// Logger receives the guard's logs (never keys, inputs or values).
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Observe, if set, is called for every protocol event (metrics).
	Observe func(Event)
	// Defaults apply to calls that leave a setting zero.
	Defaults Settings
	// MaxWait caps Call.Wait. Defaults to DefaultMaxWait (30s).
	MaxWait time.Duration
	// StoreTimeout bounds each store call. Defaults to DefaultStoreTimeout (5s).
	StoreTimeout time.Duration
	// MaxResponseBytes is the largest stored envelope, in bytes of JSON; a
	// larger one keeps everything but data. Defaults to
	// sanitize.DefaultMaxBytes (64 KiB); at least sanitize.MinMaxBytes.
	MaxResponseBytes int
	// ReplayCacheSize is the number of succeeded keys kept in memory to
	// answer replays without a store round trip; negative disables the
	// cache. Defaults to DefaultReplayCacheSize.
	ReplayCacheSize int
	// ReplayCacheMaxAge bounds how long a cached key is served without
	// asking the store. Defaults to DefaultReplayCacheMaxAge (5m).
	ReplayCacheMaxAge time.Duration
}

// Guard runs operations at most once per (tenant, scope, key) and answers
// every duplicate with the stored, sanitized result. It is safe for
// concurrent use.
type Guard struct {
	g *engine.Guard
}

// New validates cfg and returns a Guard. Close it at shutdown.
func New(cfg Config) (*Guard, error) {
	if cfg.Store == nil {
		return nil, errors.New("idemguard: Config.Store is required (NewMySQLStore or NewMemoryStore)")
	}
	ec := engine.Config{
		Store:             cfg.Store.engineStore(),
		Secret:            cfg.Secret,
		Logger:            cfg.Logger,
		Defaults:          engineSettings(cfg.Defaults),
		MaxWait:           cfg.MaxWait,
		StoreTimeout:      cfg.StoreTimeout,
		Sanitize:          sanitize.Policy{MaxBytes: cfg.MaxResponseBytes},
		ReplayCacheSize:   cfg.ReplayCacheSize,
		ReplayCacheMaxAge: cfg.ReplayCacheMaxAge,
	}
	if observe := cfg.Observe; observe != nil {
		ec.Observe = func(e engine.Event) { observe(publicEvent(e)) }
	}
	g, err := engine.New(ec)
	if err != nil {
		return nil, publicConfigError(err)
	}
	return &Guard{g: g}, nil
}

// WithIdempotency runs op at most once for (call.Tenant, call.Scope, key) and
// answers every duplicate with the stored result: a success is replayed with
// Cached true; a duplicate of a running call gets StatusInProgress (or waits,
// Call.Wait); a failure is retried while attempts remain.
//
// It returns an error only for invalid input (ErrInvalidInput), a reused
// client key with other inputs (ErrFingerprintMismatch), store failure
// (*StoreError, ErrStoreUnavailable: op did not start) and a result that is
// not a JSON object (ErrInvalidResult, returned with the Result of the stored
// failure). An operation's failure is a Result with Status StatusFailed.
func (g *Guard) WithIdempotency(ctx context.Context, call Call, op Operation) (Result, error) {
	var eop engine.Operation
	if op != nil {
		eop = func(ctx context.Context) (any, error) {
			v, err := op(ctx)
			if r, ok := v.(Response); ok {
				v = engine.Response{StatusCode: r.StatusCode, Value: r.Value}
			} else if r, ok := v.(*Response); ok && r != nil {
				v = engine.Response{StatusCode: r.StatusCode, Value: r.Value}
			}
			return v, err
		}
	}
	res, err := g.g.WithIdempotency(ctx, engine.Call{
		Tenant: call.Tenant, Scope: call.Scope, ClientKey: call.ClientKey, Inputs: call.Inputs,
		Settings: engineSettings(call.Settings), Wait: call.Wait, Timeout: call.Timeout, Detach: call.Detach,
	}, eop)
	return publicResult(res), publicError(err)
}

// Lookup returns what is stored for a client key in the tenant's scope. An
// absent or expired key, and another tenant's, is ErrNotFound.
func (g *Guard) Lookup(ctx context.Context, tenant tenancy.ID, scope, clientKey string) (KeyInfo, error) {
	info, err := g.g.Lookup(ctx, tenant, scope, clientKey)
	return publicKeyInfo(info), publicError(err)
}

// LookupHash is Lookup by the Result.KeyHash of a call, for keys derived
// from the inputs.
func (g *Guard) LookupHash(ctx context.Context, tenant tenancy.ID, scope, keyHash string) (KeyInfo, error) {
	info, err := g.g.LookupHash(ctx, tenant, scope, keyHash)
	return publicKeyInfo(info), publicError(err)
}

// Ping reports whether the store answers (readiness), as a *StoreError.
func (g *Guard) Ping(ctx context.Context) error {
	return publicError(g.g.Ping(ctx))
}

// Close cancels the context of every operation still running (cause
// ErrShuttingDown) and waits until each has recorded its outcome or ctx
// ends. A cut-off operation is stored failed: stopReason timeout (retryable)
// under StaleTakeover, abandoned (final) under StaleFail. Call Close after the
// grace period in which running operations may finish. Calls made after
// Close return a *StoreError wrapping ErrShuttingDown without claiming
// anything. Close does not close the Store's database.
func (g *Guard) Close(ctx context.Context) error {
	return g.g.Close(ctx)
}

// HashUserText is what Call.Inputs hold in place of raw user text: the hex
// SHA-256 of s trimmed, with every run of white space collapsed to one
// space. Raw text never enters a key, a fingerprint, the store or a log.
func HashUserText(s string) string { return keys.HashUserText(s) }

// publicConfigError keeps the engine's message, which names the field, but
// not its package prefix.
func publicConfigError(err error) error {
	return fmt.Errorf("idemguard: %s", trimPrefix(err.Error(), "engine: "))
}

func trimPrefix(s, p string) string {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}
