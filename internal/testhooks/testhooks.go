// Package testhooks carries the guard's test-only knobs between package
// idemguard and package idemguardtest, so that the root package exports
// none of them. Package idemguard assigns the function variables in its
// init; idemguardtest calls them, and GuardDefect is also read by the code
// beside the engine that a defect can reach (the middleware's reading of
// events, internal/eventdata).
package testhooks

import (
	"fmt"
	"time"
)

// Knobs are the settings only tests and benchmarks change. Every Config
// holds one (unexported); its zero value is production's.
type Knobs struct {
	// Now is the local clock, used only for waiting and for the replay
	// cache's own bookkeeping, never to judge a row (rows are judged by the
	// store's clock). Defaults to time.Now.
	Now func() time.Time
	// HeartbeatEvery overrides the heartbeat interval (StaleAfter/3).
	HeartbeatEvery time.Duration
	// ReadFirst says when the row is read before the claim INSERT. Defaults
	// to ReadFirstAdaptive.
	ReadFirst ReadFirst
	// Defect puts one fixed defect of the engine back (one of the Defect
	// constants; "" none), so that the simulation (internal/sim) can show
	// that it finds it. Nothing else sets it.
	Defect Defect
}

// Defect names a fixed defect of the engine that Knobs.Defect puts back.
type Defect string

// The engine's defects that can be put back.
const (
	// DefectFollowerGap: a stream follower that fell behind an answer
	// stored without its events is answered succeeded, with a gap.
	DefectFollowerGap Defect = "follower-gap"
	// DefectBlankDocument: a stored document (Call.Keep) asked for as a
	// stream is rendered as a blank envelope.
	DefectBlankDocument Defect = "blank-document"
	// DefectSplice: a stream follower attaches to whatever live log of the
	// key is open in its process, not the execution the row names.
	DefectSplice Defect = "splice"
	// DefectSelfCancel: an operation that reports stopReason canceled on
	// its own gets its attempt back, as a recorded cancel does.
	DefectSelfCancel Defect = "self-cancel"
	// DefectBlocklistMultiDocument: a streamed event whose data holds
	// several JSON documents (one per data line, say) is kept as written,
	// blocked members and all (internal/eventdata), as the middleware's
	// decoder once left it.
	DefectBlocklistMultiDocument Defect = "blocklist-multi-document"
	// DefectStaleCache: a scope that allows resets keeps its replay cache
	// entries, and answers from a read, as long as any other scope (no
	// reset fence), so a replica replays an answer reset elsewhere.
	DefectStaleCache Defect = "stale-cache"
)

// ReadFirst says when a Guard reads a row before its claim INSERT.
type ReadFirst string

const (
	// ReadFirstAdaptive reads first in a scope while at least half of its
	// recent store calls found a replayable row. The default.
	ReadFirstAdaptive ReadFirst = "adaptive"
	// ReadFirstAlways reads before every claim.
	ReadFirstAlways ReadFirst = "always"
	// ReadFirstClientKey reads first when the call carries a client key.
	ReadFirstClientKey ReadFirst = "client_key"
	// ReadFirstNever always claims first.
	ReadFirstNever ReadFirst = "never"
)

// Validate accepts the four policies and "" (the default).
func (r ReadFirst) Validate() error {
	switch r {
	case "", ReadFirstAdaptive, ReadFirstAlways, ReadFirstClientKey, ReadFirstNever:
		return nil
	}
	return fmt.Errorf("idemguard: the read-first policy must be %q, %q, %q or %q, got %q",
		ReadFirstAdaptive, ReadFirstAlways, ReadFirstClientKey, ReadFirstNever, r)
}

var (
	// ConfigKnobs returns the knobs of cfg, an *idemguard.Config.
	ConfigKnobs func(cfg any) *Knobs
	// Jobs returns how many background operations g, an *idemguard.Guard,
	// runs in this process.
	Jobs func(g any) int
	// GuardDefect returns the defect g, an *idemguard.Guard, was built to
	// put back (its Config's Knobs.Defect), for the code beside the engine
	// that reads it (internal/eventdata's callers).
	GuardDefect func(g any) Defect
)
