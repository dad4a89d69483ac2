package engine

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/sanitize"
)

// Defaults for Config and per-call settings.
const (
	// DefaultTTL is how long a key is remembered after its last completion.
	DefaultTTL = 24 * time.Hour
	// MaxTTL is the longest TTL accepted.
	MaxTTL = 7 * 24 * time.Hour
	// DefaultStaleAfter is how long a started row may go without a heartbeat
	// before another caller may take it over.
	DefaultStaleAfter = 5 * time.Minute
	// MinStaleAfter is the shortest StaleAfter accepted.
	MinStaleAfter = 300 * time.Millisecond
	// DefaultMaxAttempts is how many executions a key may get in all.
	DefaultMaxAttempts = 3
	// DefaultStoreTimeout bounds every single store call.
	DefaultStoreTimeout = 5 * time.Second
	// DefaultMaxWait caps Call.Wait.
	DefaultMaxWait = 30 * time.Second
	// DefaultReplayCacheSize is how many succeeded records a Guard keeps in
	// memory to answer replays without a round trip.
	DefaultReplayCacheSize = 10_000
	// DefaultReplayCacheMaxAge bounds how long one cached replay is served
	// from memory before the store is asked again.
	DefaultReplayCacheMaxAge = 5 * time.Minute
)

// StalePolicy says what happens to a started row whose owner went silent.
type StalePolicy string

const (
	// StaleTakeover lets the next caller take the row over and run the
	// operation again (the default).
	StaleTakeover StalePolicy = "takeover"
	// StaleFail marks the row failed with stopReason abandoned, for operations
	// that must never run twice (an already-billed model call).
	StaleFail StalePolicy = "fail"
)

// Config configures a Guard.
type Config struct {
	// Store keeps the rows. Required.
	Store Store
	// Secret keys every HMAC; at least 32 bytes. Required.
	Secret []byte
	// Logger receives the guard's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Observe, if set, is called for every protocol event (metrics).
	Observe func(Event)
	// Defaults apply to calls that leave a setting zero.
	Defaults Settings
	// MaxWait caps Call.Wait. Defaults to DefaultMaxWait.
	MaxWait time.Duration
	// StoreTimeout bounds each store call. Defaults to DefaultStoreTimeout.
	StoreTimeout time.Duration
	// Sanitize is the size policy for stored envelopes. Defaults to 64 KiB.
	Sanitize sanitize.Policy
	// ReplayCacheSize is the number of succeeded records kept in memory for
	// replays; negative disables the cache. Defaults to DefaultReplayCacheSize.
	ReplayCacheSize int
	// ReplayCacheMaxAge bounds how long a cached record is served without
	// asking the store. Defaults to DefaultReplayCacheMaxAge.
	ReplayCacheMaxAge time.Duration
	// ReadFirst says when the row is read before the claim INSERT, so that a
	// replay the cache cannot answer costs one SELECT instead of a failing
	// INSERT and a SELECT (see readfirst.go). Defaults to ReadFirstAdaptive.
	ReadFirst ReadFirst
	// HeartbeatEvery overrides the heartbeat interval (StaleAfter/3). For tests.
	HeartbeatEvery time.Duration
	// Now is the local clock, used only for waiting and for the replay
	// cache's own bookkeeping, never to judge a row. Defaults to time.Now.
	Now func() time.Time
}

// Settings are the per-scope protocol settings; a zero field takes the
// Guard's default, then the package default.
type Settings struct {
	// TTL is how long the key is remembered. Defaults to DefaultTTL; at most MaxTTL.
	TTL time.Duration
	// StaleAfter is how long a started row may go without a heartbeat before
	// it counts as abandoned. Defaults to DefaultStaleAfter.
	StaleAfter time.Duration
	// MaxAttempts is how many executions the key may get. Defaults to DefaultMaxAttempts.
	MaxAttempts int
	// StalePolicy is what happens to a stale row. Defaults to StaleTakeover.
	StalePolicy StalePolicy
}

func (s Settings) withDefaults(d Settings) Settings {
	return Settings{
		TTL:         cmp.Or(s.TTL, d.TTL, DefaultTTL),
		StaleAfter:  cmp.Or(s.StaleAfter, d.StaleAfter, DefaultStaleAfter),
		MaxAttempts: cmp.Or(s.MaxAttempts, d.MaxAttempts, DefaultMaxAttempts),
		StalePolicy: cmp.Or(s.StalePolicy, d.StalePolicy, StaleTakeover),
	}
}

// Validate reports the first setting out of range, naming it.
func (s Settings) Validate() error {
	switch {
	case s.TTL < 0 || s.TTL > MaxTTL:
		return fmt.Errorf("TTL must be between 1s and %s, got %s", MaxTTL, s.TTL)
	case s.TTL != 0 && s.TTL < time.Second:
		return fmt.Errorf("TTL must be between 1s and %s, got %s", MaxTTL, s.TTL)
	case s.StaleAfter != 0 && s.StaleAfter < MinStaleAfter:
		return fmt.Errorf("StaleAfter must be at least %s, got %s", MinStaleAfter, s.StaleAfter)
	case s.MaxAttempts < 0 || s.MaxAttempts > 100:
		return fmt.Errorf("MaxAttempts must be between 1 and 100, got %d", s.MaxAttempts)
	case s.StalePolicy != "" && s.StalePolicy != StaleTakeover && s.StalePolicy != StaleFail:
		return fmt.Errorf("StalePolicy must be %q or %q, got %q", StaleTakeover, StaleFail, s.StalePolicy)
	}
	return nil
}

func (c Config) validate() error {
	if c.Store == nil {
		return fmt.Errorf("engine: Config.Store is required")
	}
	if len(c.Secret) < keys.MinSecretBytes {
		return fmt.Errorf("engine: Config.Secret must be at least %d bytes, got %d", keys.MinSecretBytes, len(c.Secret))
	}
	if err := c.Defaults.Validate(); err != nil {
		return fmt.Errorf("engine: Config.Defaults: %w", err)
	}
	if c.MaxWait < 0 || c.StoreTimeout < 0 || c.ReplayCacheMaxAge < 0 || c.HeartbeatEvery < 0 {
		return fmt.Errorf("engine: Config durations must not be negative")
	}
	if err := c.ReadFirst.validate(); err != nil {
		return err
	}
	if c.Sanitize.MaxBytes != 0 {
		if err := c.Sanitize.Validate(); err != nil {
			return fmt.Errorf("engine: Config.Sanitize: %w", err)
		}
	}
	return nil
}
