package idemguard

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/tenancy"
)

// Defaults of Settings and Config. A zero field takes the Guard's default,
// then these.
const (
	// DefaultTTL is how long a key is remembered after its last completion.
	DefaultTTL = 24 * time.Hour
	// MaxTTL is the longest TTL accepted.
	MaxTTL = 7 * 24 * time.Hour
	// MaxActorLen is the longest Call.Actor accepted, in bytes.
	MaxActorLen = 128
	// DefaultStaleAfter is how long a started key may go without a heartbeat
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
	// DefaultReplayCacheSize is how many succeeded keys a Guard keeps in
	// memory to answer replays without a round trip.
	DefaultReplayCacheSize = 10_000
	// DefaultReplayCacheBytes bounds the memory of the replay cache (64 MiB).
	DefaultReplayCacheBytes = 64 << 20
	// DefaultReplayCacheMaxAge bounds how long one cached replay is served
	// from memory before the store is asked again.
	DefaultReplayCacheMaxAge = 5 * time.Minute
)

// StalePolicy says what happens to a started key whose owner went silent for
// StaleAfter.
type StalePolicy string

const (
	// StaleTakeover lets the next caller take the key over and run the
	// operation again (the default).
	StaleTakeover StalePolicy = "takeover"
	// StaleFail stores the key failed with stopReason abandoned instead, for
	// operations that must never run twice (an already-billed model call).
	StaleFail StalePolicy = "fail"
)

// Settings are a scope's protocol settings. A zero field takes
// Config.Defaults, then the package default.
type Settings struct {
	// TTL is how long the key is remembered. Defaults to DefaultTTL (24h);
	// between 1s and MaxTTL (7 days).
	TTL time.Duration
	// StaleAfter is how long a started key may go without a heartbeat before
	// it counts as abandoned. Defaults to DefaultStaleAfter (5m); at least
	// MinStaleAfter.
	StaleAfter time.Duration
	// MaxAttempts is how many executions the key may get. Defaults to
	// DefaultMaxAttempts (3); at most 100.
	MaxAttempts int
	// StalePolicy is what happens to a stale key. Defaults to StaleTakeover.
	StalePolicy StalePolicy
	// ProgressStages are the stage names the scope's operations may report
	// with their progress (package progress): at most 64 names of 1–48
	// characters of [A-Za-z0-9._:-]. Any other stage is dropped and
	// counted (EventDroppedField, field "(progress stage)"). nil takes
	// Config.Defaults'; none allows no stage, only numbers.
	ProgressStages []string

	// AllowReset lets a finished key of the scope run again on request:
	// Guard.Reset and Call.ForceNew. Off by default (either this or
	// Config.Defaults turns it on): a second run of the operation costs
	// what the guard exists to prevent, so a scope opts in. A scope that
	// allows it keeps its answers in the replay cache for at most a
	// second, and a reset answers only after that second has passed (see
	// "Reset and forced runs" in protocol.go). Give every process the same
	// value for a scope.
	AllowReset bool
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
	return validateProgressStages(s.ProgressStages)
}

// Call describes one guarded execution.
type Call struct {
	// Tenant owns the key. Required: 1–64 characters of [A-Za-z0-9._-].
	Tenant tenancy.ID
	// Scope names the operation, e.g. "actionRequests.aiProposeCopy".
	// Required: 1–255 characters of [A-Za-z0-9._:-].
	Scope string
	// ClientKey is the caller's idempotency key (1–255 characters of
	// [A-Za-z0-9_.:-]). Optional: without it the key is derived from Inputs.
	// With it, the same key with other Inputs is ErrFingerprintMismatch.
	ClientKey string
	// Inputs identify the operation's result: any JSON-encodable value, or a
	// json.RawMessage. They are canonicalized (object keys sorted, numbers as
	// written) and only their HMAC is stored. Raw user text must go in as
	// HashUserText(text).
	Inputs any
	// Settings override the Guard's defaults for this call's scope.
	Settings Settings
	// Wait, when positive, waits (bounded by Config.MaxWait) for a running
	// duplicate to finish instead of answering StatusInProgress at once.
	Wait time.Duration
	// Timeout, when positive, bounds the operation; it then fails with
	// stopReason timeout.
	Timeout time.Duration
	// Detach keeps the operation running when ctx is cancelled (a client that
	// hung up still gets its result on retry); only Timeout, a lost claim or
	// Guard.Close stop it then.
	Detach bool
	// Keep, when set, stores the operation's value as the JSON document it
	// is, reduced to these fields, instead of the envelope: for answers that
	// are a team's own API (the routers middleware sets it from its
	// options). The blocked keys are removed at any depth either way. The
	// first caller gets exactly the bytes every replay gets.
	Keep *sanitize.Allowlist
	// Check, when set, is called once before the call writes a claim (a
	// fresh key, a retry, a takeover); its error is returned as it is, and
	// nothing is written or run. A replay answered from the replay cache or
	// by the read before the claim (which the guard does for scopes whose
	// calls are mostly replays) does not call it, so a check that costs
	// something, such as decoding a body against its schema, is mostly paid
	// by calls that run.
	Check func() error
	// Admit, when set, asks for a place for the execution this call would
	// start: it is called with the key's hash after Check, before each
	// claim write (a fresh key, a retry, a takeover), and the release it
	// returns is called once the claim is not this call's to run (the
	// write lost to a duplicate) or its execution ended, in the background
	// too. Concurrent calls of one key each ask (one of them wins the
	// claim): give them one place (the hash says which calls are one key).
	// An error refuses the execution: before the call has read the key's
	// row, the row is read first, so that a duplicate of a running key
	// still joins it and a stored answer is still replayed; the error is
	// returned as it is only when the call would otherwise write a claim,
	// and nothing is written or run. A limit on concurrent executions per
	// tenant is its use (routers.Limits).
	Admit func(keyHash string) (release func(), err error)
	// Principal, when set, makes the key private to one caller of the
	// tenant (a user, an API key): it enters the key hash with the tenant
	// and the scope, so another principal's same client key or same inputs
	// name another key, which Lookup, Watch, Cancel, History and replays
	// never mix up with this one. Only the HMAC is stored, never the
	// principal. Look such a key up with Guard.PrincipalKey. Empty: the
	// tenant's shared key space. At most 1024 printable bytes.
	Principal string
	// Actor names who asked, for the audit trail only (Config.Audit): an
	// API key's name, a hashed user id; never a credential or personal
	// data. At most MaxActorLen printable bytes. Defaults to
	// ActorFrom(ctx).
	Actor string
	// ForceNew runs the operation again on a finished key (succeeded or
	// failed, not expired), under the same key, and stores the new answer
	// in place of the old one; Result.Forced and Result.Replaced say so.
	// On an absent key it is an ordinary first run; on a running key the
	// answer is StatusInProgress at once (Wait is ignored). Only an answer
	// stored before the call began is replaced: concurrent forced calls of
	// one finished key run the operation once, and the others (and a forced
	// call that finds an answer stored since it began) are answered as
	// duplicates of that run. The scope must allow it
	// (Settings.AllowReset), else store.ErrResetForbidden and nothing runs.
	ForceNew bool
	// LastEventID, for DoStream only, is the ID of the last chunk the
	// caller received of an earlier request for the key (a dropped
	// connection): the stream resumes after it, from the same attempt, with
	// no chunk missing or repeated. A chunk ID of another attempt (or one
	// whose chunks cannot be delivered again as they were) restarts the
	// stream from the current attempt's first chunk, and StreamStart.Restart
	// says so. The form of Chunk.ID; anything else is ErrInvalidInput.
	LastEventID string
}

// Operation is the guarded work. Its value must be a JSON object (a struct,
// a map, json.RawMessage, a sanitize.Envelope) and is sanitized before it is
// stored or returned: only the envelope fields survive (ok, stopReason,
// createdActionRequestIds, traceId, needsHuman, data with primitive values),
// and each field dropped is logged by name and counted (EventDroppedField).
// nil means a success without data. Any other value (a string, a number, a
// slice) is ErrInvalidResult. Wrap the value in Response to choose the HTTP
// status stored and replayed with it.
//
// ctx is cancelled when the claim is lost (cause ErrOwnershipLost), at
// Call.Timeout, or when the Guard closes (cause ErrShuttingDown). Return an
// *OpError to say why the operation failed.
type Operation func(ctx context.Context) (any, error)

// Response is an operation value with an explicit HTTP status (default 200),
// stored and replayed with it. A status of 400 or more is an answer that
// says no: its envelope is stored with ok false (stop reason invalid_input
// unless it names another), never as a success.
type Response struct {
	StatusCode int
	Value      any
	// Usage is what the operation spent (model tokens), stored with the
	// answer: each replay reports it as spending avoided (Event.Usage).
	Usage Usage
	// Header holds response headers stored and replayed with the answer.
	// Put there only what may be stored: the routers middleware keeps
	// Content-Type, Location and the headers a team names.
	Header http.Header
}

// Usage is the model usage of an operation's answer, in tokens.
type Usage struct {
	PromptTokens     int64 `json:"prompt,omitempty"`
	CompletionTokens int64 `json:"completion,omitempty"`
}
