package idemguard

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/internal/testhooks"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// Config configures a Guard.
type Config struct {
	// Store holds the idempotency records: a MySQL store (package
	// github.com/idemguard/idemguard/mysql) or memstore.New (package store/memstore). Required.
	Store store.Store
	// Secret keys every HMAC of keys and fingerprints; at least 32 bytes.
	// Required. Every process sharing a store must use the same secret, or
	// know each other's as PreviousSecrets while the secret is rotated.
	Secret []byte
	// SecretID names Secret in the rows made under it (secret_id): 1 to
	// 32 characters of [A-Za-z0-9._-]. Defaults to "", the
	// unnamed secret.
	SecretID string
	// PreviousSecrets are secrets no longer claimed under whose rows still
	// count: a request is a duplicate of a live row made under any of them
	// (replay, in progress, mismatch, retry, takeover). Each costs one more
	// indexed read on a call that wins a claim (see docs/OPERATIONS.md for
	// the rotation). Defaults to none: no extra statement.
	PreviousSecrets []SecretVersion
	// Logger receives the guard's logs (never keys, inputs or values).
	// Defaults to slog.Default().
	Logger *slog.Logger
	// Observe, if set, is called with every Event of the Guard: each
	// protocol step (metrics) and, with Audit.Observe, each audit decision.
	Observe func(Event)
	// Audit turns on the audit trail: one record (store.AuditEvent) per
	// idempotency decision, to Observe (as EventAudit), the store, or both.
	// Off by default.
	Audit AuditConfig
	// Defaults apply to calls that leave a setting zero.
	Defaults Settings
	// MaxWait caps Call.Wait. Defaults to DefaultMaxWait (30s).
	MaxWait time.Duration
	// StoreTimeout bounds each store call. Defaults to DefaultStoreTimeout (5s).
	// Writes sent within a hundredth of it of each other (at most 50ms)
	// share one deadline, so a write may end up to that much sooner.
	StoreTimeout time.Duration
	// MaxResponseBytes is the largest stored envelope, in bytes of JSON; a
	// larger one keeps everything but data. Defaults to
	// sanitize.DefaultMaxBytes (64 KiB); at least sanitize.MinMaxBytes.
	MaxResponseBytes int
	// ReplayCacheSize is the number of succeeded keys kept in memory to
	// answer replays without a store round trip; negative disables the
	// cache. Defaults to DefaultReplayCacheSize.
	ReplayCacheSize int
	// ReplayCacheBytes bounds the memory the replay cache holds, in bytes
	// (each entry counted as its body, the envelope decoded beside it, its
	// headers and a fixed overhead). Defaults to DefaultReplayCacheBytes
	// (64 MiB).
	ReplayCacheBytes int64
	// ReplayCacheTenantBytes is one tenant's share of ReplayCacheBytes: a
	// tenant over it evicts its own least recently used entries, never
	// another tenant's. Defaults to half of ReplayCacheBytes.
	ReplayCacheTenantBytes int64
	// ReplayCacheMaxAge bounds how long a cached key is served without
	// asking the store. Defaults to DefaultReplayCacheMaxAge (5m).
	ReplayCacheMaxAge time.Duration
	// MaxWatchersPerKey bounds the watchers (Guard.Watch) of one key in
	// this process. Defaults to 100.
	MaxWatchersPerKey int
	// MaxWatchersPerTenant bounds the watchers of one tenant's keys in this
	// process. Defaults to 1000.
	MaxWatchersPerTenant int
	// MaxStreamBytes bounds a streamed answer's stored event sequence; a
	// longer one is delivered but stored as its envelope only (DoStream).
	// It also bounds the events of a running stream kept in this process
	// for the callers that follow it (and of a background job's log), so a
	// follower that falls behind finds the rest stored, or is told its
	// stream is incomplete. Defaults to DefaultMaxStreamBytes (1 MiB).
	MaxStreamBytes int
	// MaxWaiters bounds the calls of this process that wait for (or follow
	// the stream of) one running key; over it a call gets
	// ErrTooManyWaiters at once. Defaults to DefaultMaxWaiters (100).
	MaxWaiters int
	// MaxLiveStreams bounds the streams this process runs at once (each
	// holds a live log of up to MaxStreamBytes); a DoStream that would
	// claim one more gets ErrTooManyLiveStreams before it claims. Defaults
	// to DefaultMaxLiveStreams (512).
	MaxLiveStreams int
	// test holds the knobs only tests change (package idemguardtest sets
	// them); production leaves it zero.
	test testhooks.Knobs
}

func init() {
	testhooks.ConfigKnobs = func(cfg any) *testhooks.Knobs { return &cfg.(*Config).test }
	testhooks.Jobs = func(g any) int { return g.(*Guard).runningJobs() }
	testhooks.GuardDefect = func(g any) testhooks.Defect { return g.(*Guard).cfg.test.Defect }
}

func (s Settings) withDefaults(d Settings) Settings {
	out := Settings{
		TTL:            cmp.Or(s.TTL, d.TTL, DefaultTTL),
		StaleAfter:     cmp.Or(s.StaleAfter, d.StaleAfter, DefaultStaleAfter),
		MaxAttempts:    cmp.Or(s.MaxAttempts, d.MaxAttempts, DefaultMaxAttempts),
		StalePolicy:    cmp.Or(s.StalePolicy, d.StalePolicy, StaleTakeover),
		ProgressStages: s.ProgressStages,
		AllowReset:     s.AllowReset || d.AllowReset,
	}
	if s.ProgressStages == nil {
		out.ProgressStages = d.ProgressStages
	}
	return out
}

func (c Config) validate() error {
	if c.Store == nil {
		return fmt.Errorf("idemguard: Config.Store is required (a MySQL store from package mysql, or memstore.New)")
	}
	if len(c.Secret) < keys.MinSecretBytes {
		return fmt.Errorf("idemguard: Config.Secret must be at least %d bytes, got %d", keys.MinSecretBytes, len(c.Secret))
	}
	if err := c.validateSecrets(); err != nil {
		return err
	}
	if err := c.Defaults.Validate(); err != nil {
		return fmt.Errorf("idemguard: Config.Defaults: %w", err)
	}
	if c.ReplayCacheBytes < 0 || c.ReplayCacheTenantBytes < 0 {
		return fmt.Errorf("idemguard: Config.ReplayCacheBytes and Config.ReplayCacheTenantBytes must not be negative (0 means the default)")
	}
	if c.MaxStreamBytes < 0 || c.MaxWaiters < 0 || c.MaxLiveStreams < 0 {
		return fmt.Errorf("idemguard: Config.MaxStreamBytes, Config.MaxWaiters and Config.MaxLiveStreams must not be negative (0 means the default)")
	}
	if c.MaxWait < 0 || c.StoreTimeout < 0 || c.ReplayCacheMaxAge < 0 || c.test.HeartbeatEvery < 0 {
		return fmt.Errorf("idemguard: Config durations must not be negative")
	}
	if err := c.Audit.validate(c.Observe != nil); err != nil {
		return err
	}
	if err := c.test.ReadFirst.Validate(); err != nil {
		return err
	}
	if c.MaxResponseBytes != 0 {
		if err := (sanitize.Policy{MaxBytes: c.MaxResponseBytes}).Validate(); err != nil {
			return fmt.Errorf("idemguard: Config.MaxResponseBytes: %w", err)
		}
	}
	return nil
}
