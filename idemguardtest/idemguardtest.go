// Package idemguardtest holds what tests of idemguard, and of code that uses
// it, need and production never sees: a guard's local clock, its heartbeat
// interval, its read-first policy, and the count of its background
// operations. Each setter changes a Config before it is given to
// idemguard.New; a Config that no setter touched behaves as in production.
//
// Rows are aged through the store a test uses: memstore.Store.Age for the
// in-memory store, an UPDATE of the row's times for MySQL.
package idemguardtest

import (
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/testhooks"
)

// ReadFirst says when a Guard reads a row before its claim INSERT (the
// replay fast path; see the package documentation of idemguard).
type ReadFirst string

// The read-first policies.
const (
	// ReadFirstAdaptive reads first in a scope while at least half of its
	// recent store calls found a replayable row. The default, which no
	// workload needs to change.
	ReadFirstAdaptive ReadFirst = "adaptive"
	// ReadFirstAlways reads before every claim.
	ReadFirstAlways ReadFirst = "always"
	// ReadFirstClientKey reads first when the call carries a client key (a
	// client retrying with its key is the common replay).
	ReadFirstClientKey ReadFirst = "client_key"
	// ReadFirstNever always claims first (one round trip for a fresh key,
	// two for a replay the replay cache does not hold).
	ReadFirstNever ReadFirst = "never"
)

// SetClock sets the guard's local clock, used only for waiting and for the
// replay cache's own bookkeeping, never to judge a row (rows are judged by
// the store's clock). Defaults to time.Now.
func SetClock(cfg *idemguard.Config, now func() time.Time) { testhooks.ConfigKnobs(cfg).Now = now }

// SetHeartbeatEvery overrides the heartbeat interval of a running operation
// (StaleAfter/3 by default).
func SetHeartbeatEvery(cfg *idemguard.Config, d time.Duration) {
	testhooks.ConfigKnobs(cfg).HeartbeatEvery = d
}

// SetReadFirst sets when the guard reads a row before its claim INSERT.
// Defaults to ReadFirstAdaptive. idemguard.New rejects an unknown policy.
func SetReadFirst(cfg *idemguard.Config, r ReadFirst) {
	testhooks.ConfigKnobs(cfg).ReadFirst = testhooks.ReadFirst(r)
}

// Jobs reports how many background operations (Guard.Start) g runs in this
// process.
func Jobs(g *idemguard.Guard) int { return testhooks.Jobs(g) }
