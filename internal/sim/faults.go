package sim

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idemguard/idemguard/internal/testhooks"
	"github.com/idemguard/idemguard/store"
)

// Window is a stretch of time, as offsets from the start of a run.
type Window struct{ From, To time.Duration }

func (w Window) has(d time.Duration) bool { return d >= w.From && d < w.To }

// Plan is the fault schedule of one replica's store connection.
type Plan struct {
	// Rate is the probability that a store call before Quiet gets a fault of its own: a lost
	// reply, an unknown outcome (1213/1205), a slow reply (up to MaxDelay), or a failed read.
	Rate     float64
	MaxDelay time.Duration
	// Answered is the store timeout: half the slow replies come within it (the engine gets
	// a late answer), half may not (the write may land after its caller gave up).
	Answered time.Duration
	// Outages are windows in which every call fails at once, unapplied (connection refused).
	Outages []Window
	// Pauses are windows in which the replica is frozen: every store call it makes waits for
	// the window's end, so its heartbeats stall (its operations wait too; see Simulate).
	Pauses []Window
	// CrashAt, if positive, is when the replica dies: from then on every call it makes blocks
	// until the run ends and never reaches the store.
	CrashAt time.Duration
	// Quiet is when the faults stop (outages, pauses and per-call faults; a crash is for good).
	Quiet time.Duration
}

// Defect names a historical bug that the simulation can put back, to prove the checker
// finds it. The store defects (Defects) are put back by Faults: none of them exists in the
// engine or the stores; each is the behaviour of a store (or of an engine) that had it.
// The engine defects (EngineDefects) were fixed in the engine (one of them in the reading of
// a handler's events that the middleware and the simulation's streams share), and the
// engine puts them back when a test knob asks (internal/testhooks, Knobs.Defect); only the
// simulation sets it.
type Defect string

const (
	// DefectNone: the store behaves.
	DefectNone Defect = ""
	// DefectUnknownAsLostRace: a write that got 1213 (a deadlock victim or a certification
	// failure, not applied) is reported as a lost race: Claim as ErrDuplicate, every guarded
	// UPDATE as "changed no row". The MySQL store read 1213 this way until the engine learned
	// to decide by the row.
	DefectUnknownAsLostRace Defect = "unknown-as-lost-race"
	// DefectNoRelease: a claim whose caller was told nothing ran is never given back
	// (Store.Release does nothing): the engine before releases existed.
	DefectNoRelease Defect = "no-release"
	// DefectCommitUnknownAsLostRace is DefectUnknownAsLostRace for the commit alone. The
	// engine settles a commit that changed no row by re-reading it, which masks this store
	// defect; it shows only with an engine that takes "changed no row" on a commit as a lost
	// claim (as the engine once did), so it is not in Defects.
	DefectCommitUnknownAsLostRace Defect = "commit-unknown-as-lost-race"
)

// The engine's fixed defects the simulation can put back (see testhooks.Defect).
const (
	// DefectFollowerGap: a stream follower slower than the owner, of an answer stored
	// without its events (over Config.MaxStreamBytes), is answered succeeded with a gap.
	DefectFollowerGap = Defect(testhooks.DefectFollowerGap)
	// DefectBlankDocument: a stored document (Call.Keep) asked for as a stream streams as a
	// blank envelope.
	DefectBlankDocument = Defect(testhooks.DefectBlankDocument)
	// DefectSplice: a stream follower attaches to the live log open in its process, an old
	// owner's whose operation outlived its claim, instead of the execution the row names.
	DefectSplice = Defect(testhooks.DefectSplice)
	// DefectSelfCancel: an operation that reports stopReason canceled itself gets its
	// attempt back.
	DefectSelfCancel = Defect(testhooks.DefectSelfCancel)
	// DefectBlocklistMultiDocument: an event whose data holds several JSON documents is
	// kept as written by the middleware's reading of events (internal/eventdata), blocked
	// members and all; the simulation's streams of Documents pass through that reading.
	DefectBlocklistMultiDocument = Defect(testhooks.DefectBlocklistMultiDocument)
	// DefectStaleCache: a scope that allows resets keeps cached answers as long as any other
	// (no reset fence), so a replica replays an answer a reset or a forced run ended.
	DefectStaleCache = Defect(testhooks.DefectStaleCache)
)

// Defects lists the defects Faults can put back.
var Defects = []Defect{DefectUnknownAsLostRace, DefectNoRelease}

// EngineDefects lists the engine's defects the simulation can put back.
var EngineDefects = []Defect{DefectFollowerGap, DefectBlankDocument, DefectSplice, DefectSelfCancel,
	DefectBlocklistMultiDocument, DefectStaleCache}

// Errors the fault layer returns.
var (
	// ErrLostReply is a write that applied and whose reply was lost (a connection dropped
	// after sending): the outcome is unknown to the engine.
	ErrLostReply = fmt.Errorf("sim: connection lost after the statement was sent: %w", driver.ErrBadConn)
	// ErrDeadlock is MySQL's 1213 as the store reports it: not applied, outcome unknown.
	ErrDeadlock = fmt.Errorf("sim: Error 1213 (40001): Deadlock found when trying to get lock: %w", store.ErrOutcomeUnknown)
	// ErrRefused is a call made during an outage.
	ErrRefused = fmt.Errorf("sim: connection refused: %w", driver.ErrBadConn)
	// ErrDead is what a crashed replica's calls return once the run has ended.
	ErrDead = errors.New("sim: the process is dead")
)

// Faults wraps a Store (a Recorder, normally) and injects the faults of a Plan for one
// replica. Times are measured from start. It is safe for concurrent use.
type Faults struct {
	st      store.Store
	h       *History
	replica int
	plan    Plan
	start   time.Time
	defect  Defect
	ended   <-chan struct{}

	mu  sync.Mutex
	rng *rand.Rand
	// late counts statements still to land (slow replies); Wait waits for them.
	late sync.WaitGroup
}

var _ store.Store = (*Faults)(nil)

// NewFaults wraps store for replica with plan; ended is closed when the run ends (it
// releases a crashed replica's blocked calls).
func NewFaults(st store.Store, h *History, replica int, plan Plan, seed uint64, start time.Time,
	defect Defect, ended <-chan struct{}) *Faults {
	return &Faults{st: st, h: h, replica: replica, plan: plan, start: start, defect: defect, ended: ended,
		rng: rand.New(rand.NewPCG(seed, uint64(replica)+0x5eed))}
}

// Wait waits until every slow statement has landed.
func (f *Faults) Wait() { f.late.Wait() }

type faultKind int

const (
	faultNone faultKind = iota
	faultLostReply
	faultDeadlock
	faultSlowApplyFirst // applied at once, the reply comes late
	faultSlowApplyLate  // the statement waits (a lock), then applies and replies
	faultReadError
)

// draw picks the fault of one call.
func (f *Faults) draw(write bool) (faultKind, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rng.Float64() >= f.plan.Rate {
		return faultNone, 0
	}
	limit := f.plan.MaxDelay
	if f.plan.Answered > 0 && f.rng.IntN(2) == 0 {
		limit = f.plan.Answered
	}
	d := time.Duration(f.rng.Int64N(int64(limit) + 1))
	if !write {
		if f.rng.IntN(2) == 0 {
			return faultReadError, 0
		}
		return faultSlowApplyFirst, d
	}
	switch f.rng.IntN(4) {
	case 0:
		return faultLostReply, 0
	case 1:
		return faultDeadlock, 0
	case 2:
		return faultSlowApplyFirst, d
	}
	return faultSlowApplyLate, d
}

// call runs do (the statement) under the replica's plan.
func call[T any](f *Faults, ctx context.Context, write bool, ok func(T) bool, do func(context.Context) (T, error)) (T, error) {
	var zero T
	s := &slot{sent: time.Now(), replica: f.replica}
	ctx = withSlot(ctx, s)
	for {
		at := time.Since(f.start)
		if f.plan.CrashAt > 0 && at >= f.plan.CrashAt {
			f.h.Crash(f.replica, f.start.Add(f.plan.CrashAt))
			<-f.ended
			return zero, ErrDead
		}
		if at >= f.plan.Quiet {
			break
		}
		paused := false
		for _, w := range f.plan.Pauses {
			if w.has(at) {
				// Frozen: nothing leaves the process until the pause ends.
				time.Sleep(w.To - at)
				paused = true
			}
		}
		if paused {
			continue
		}
		for _, w := range f.plan.Outages {
			if w.has(at) {
				f.h.tell(s, false, ErrRefused)
				return zero, ErrRefused
			}
		}
		if !write && callOf(ctx) < 0 {
			// A read of the engine's background task (the release of claims whose callers
			// were told nothing ran): outages, pauses and crashes reach it, per-call faults do
			// not, so that the checker can hold it to giving back every claim it could see.
			break
		}
		kind, d := f.draw(write)
		switch kind {
		case faultLostReply:
			_, _ = do(context.WithoutCancel(ctx))
			f.h.tell(s, false, ErrLostReply)
			return zero, ErrLostReply
		case faultDeadlock:
			f.h.tell(s, false, ErrDeadlock)
			return zero, ErrDeadlock
		case faultReadError:
			f.h.tell(s, false, ErrRefused)
			return zero, ErrRefused
		case faultSlowApplyFirst:
			v, err := do(context.WithoutCancel(ctx))
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				f.h.tell(s, err == nil && ok(v), err)
				return v, err
			case <-ctx.Done():
				f.h.tell(s, false, ctx.Err())
				return zero, ctx.Err()
			}
		case faultSlowApplyLate:
			type answer struct {
				v   T
				err error
			}
			done := make(chan answer, 1)
			f.late.Add(1)
			go func() {
				defer f.late.Done()
				time.Sleep(d)
				v, err := do(context.WithoutCancel(ctx))
				done <- answer{v, err}
			}()
			select {
			case a := <-done:
				f.h.tell(s, a.err == nil && ok(a.v), a.err)
				return a.v, a.err
			case <-ctx.Done():
				f.h.tell(s, false, ctx.Err())
				return zero, ctx.Err()
			}
		}
		break
	}
	return do(ctx)
}

func isTrue(b bool) bool { return b }

// lostRace reports whether a write's error should be read as a lost race (the defect).
func (f *Faults) lostRace(err error) bool {
	return f.defect == DefectUnknownAsLostRace && errors.Is(err, ErrDeadlock)
}

// Claim implements store.Store.
func (f *Faults) Claim(ctx context.Context, p store.ClaimParams) (uint64, error) {
	f.h.claimSent(p.Nonce, time.Now())
	id, err := call(f, ctx, true, func(id uint64) bool { return id != 0 }, func(ctx context.Context) (uint64, error) {
		return f.st.Claim(ctx, p)
	})
	if f.lostRace(err) {
		return 0, store.ErrDuplicate
	}
	return id, err
}

// Get implements store.Store.
func (f *Faults) Get(ctx context.Context, tenant, scope, keyHash string) (store.Record, error) {
	return call(f, ctx, false, func(store.Record) bool { return true }, func(ctx context.Context) (store.Record, error) {
		return f.st.Get(ctx, tenant, scope, keyHash)
	})
}

func (f *Faults) guarded(ctx context.Context, do func(context.Context) (bool, error)) (bool, error) {
	ok, err := call(f, ctx, true, isTrue, do)
	if f.lostRace(err) {
		return false, nil
	}
	return ok, err
}

// Reclaim implements store.Store.
func (f *Faults) Reclaim(ctx context.Context, p store.ReclaimParams) (bool, error) {
	f.h.claimSent(p.NewNonce, time.Now())
	return f.guarded(ctx, func(ctx context.Context) (bool, error) { return f.st.Reclaim(ctx, p) })
}

// Abandon implements store.Store.
func (f *Faults) Abandon(ctx context.Context, p store.AbandonParams) (bool, error) {
	return f.guarded(ctx, func(ctx context.Context) (bool, error) { return f.st.Abandon(ctx, p) })
}

// Heartbeat implements store.Store.
func (f *Faults) Heartbeat(ctx context.Context, id uint64, nonce string) (bool, error) {
	return f.guarded(ctx, func(ctx context.Context) (bool, error) { return f.st.Heartbeat(ctx, id, nonce) })
}

// Complete implements store.Store.
func (f *Faults) Complete(ctx context.Context, p store.CompleteParams) (bool, time.Time, error) {
	type answer struct {
		ok bool
		at time.Time
	}
	a, err := call(f, ctx, true, func(a answer) bool { return a.ok }, func(ctx context.Context) (answer, error) {
		ok, at, err := f.st.Complete(ctx, p)
		return answer{ok, at}, err
	})
	if f.lostRace(err) || f.defect == DefectCommitUnknownAsLostRace && errors.Is(err, ErrDeadlock) {
		return false, time.Time{}, nil
	}
	return a.ok, a.at, err
}

// Release implements store.Store.
func (f *Faults) Release(ctx context.Context, p store.ReleaseParams) (bool, error) {
	if f.defect == DefectNoRelease {
		return true, nil
	}
	f.h.releaseSent(p.Nonce, time.Now())
	return f.guarded(ctx, func(ctx context.Context) (bool, error) { return f.st.Release(ctx, p) })
}

// Ping implements store.Store.
func (f *Faults) Ping(ctx context.Context) error {
	_, err := call(f, ctx, false, isTrue, func(ctx context.Context) (bool, error) { return true, f.st.Ping(ctx) })
	return err
}

// Renew implements store.Store: the running owner's heartbeat, faulted like any guarded
// write.
func (f *Faults) Renew(ctx context.Context, p store.RenewParams) (store.RenewResult, error) {
	r, err := call(f, ctx, true, func(r store.RenewResult) bool { return r.Renewed },
		func(ctx context.Context) (store.RenewResult, error) { return f.st.Renew(ctx, p) })
	if f.lostRace(err) {
		return store.RenewResult{}, nil
	}
	return r, err
}

// GetMany implements store.Store, faulted like Get.
func (f *Faults) GetMany(ctx context.Context, tenant, scope string, keyHashes []string) ([]store.Record, error) {
	return call(f, ctx, false, func([]store.Record) bool { return true }, func(ctx context.Context) ([]store.Record, error) {
		return f.st.GetMany(ctx, tenant, scope, keyHashes)
	})
}

// RequestCancel implements store.Store, faulted like any guarded write.
func (f *Faults) RequestCancel(ctx context.Context, p store.CancelParams) (bool, error) {
	return f.guarded(ctx, func(ctx context.Context) (bool, error) { return f.st.RequestCancel(ctx, p) })
}

// Reset implements store.Store, faulted like any guarded write.
func (f *Faults) Reset(ctx context.Context, p store.ResetParams) (bool, error) {
	return f.guarded(ctx, func(ctx context.Context) (bool, error) { return f.st.Reset(ctx, p) })
}

// AppendAudit implements store.Store, faulted like any write whose
// outcome the caller may not learn.
func (f *Faults) AppendAudit(ctx context.Context, events []store.AuditEvent) error {
	_, err := f.guarded(ctx, func(ctx context.Context) (bool, error) { return true, f.st.AppendAudit(ctx, events) })
	return err
}

// History implements store.Store, faulted like Get.
func (f *Faults) History(ctx context.Context, tenant, scope string, keyHashes []string, limit int) ([]store.AuditEvent, error) {
	return call(f, ctx, false, func([]store.AuditEvent) bool { return true }, func(ctx context.Context) ([]store.AuditEvent, error) {
		return f.st.History(ctx, tenant, scope, keyHashes, limit)
	})
}
