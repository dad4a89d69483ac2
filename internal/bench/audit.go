package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/idemguard/idemguard"
)

// The audit suite measures what the audit trail costs, against the same
// build with auditing off and against the raw durable floor. Audited guards
// write to the store (Config.Audit.Store: a claim's event carried by the
// claim's own INSERT, replays counted in batches off the request path) and
// hand every event to an observer that only counts it, as serve's stream
// writer queues it; the unaudited twins have the same observer (serve's
// guard always has one, for its metrics). Cases:
//   - the raw durable floor: the INSERT and the guarded UPDATE a fresh key
//     minimally needs (the fresh suite's raw-insert-update), as text, and
//     the same two prepared on the server as the MySQL store runs its
//     claim and completion (raw-insert-update-prepared, reported);
//   - fresh keys (claim, no-op operation, complete), audit off and on;
//   - store replays (replay cache off): one observed event per replay,
//     counted in its key's tally for the batch writer;
//   - cached replays: the same, from memory; and from memory with the
//     trail stored but not observed (replay-cached-audit-stored), where
//     a replay builds no event at all, only adds to its tally.
// Each audited case's ratio is against its unaudited twin; fresh with
// audit on must reach auditFreshTarget of both its twin and the floor, at
// every concurrency (the ratio to the floor is printed as a note).

func init() {
	register(suite{name: "audit", about: "fresh and replay paths with the audit trail on (table + observer) vs off", run: runAudit})
}

const (
	scopeAuditFresh  = "bench.audit.fresh"
	scopeAuditReplay = "bench.audit.replay"
)

// auditFreshTarget is the least throughput ratio of a fresh key with the
// audit trail on, to the same with it off and to the raw durable floor.
const auditFreshTarget = 0.9

func auditReplayCall(n int64) idemguard.Call {
	return idemguard.Call{Tenant: tenantGuard, Scope: scopeAuditReplay, ClientKey: "audit-replay-" + strconv.FormatInt(n, 10),
		Inputs: inputs{Doc: n, Text: textHash}}
}

func runAudit(ctx context.Context, e *env) ([]row, error) {
	if _, err := populate(ctx, e, replayKeys, auditReplayCall); err != nil {
		return nil, err
	}
	body, err := storedBody()
	if err != nil {
		return nil, err
	}
	// Every guard has the same observer, as serve's guard always has one
	// (its metrics), audit trail or not: the twins differ only in
	// Config.Audit, so a ratio is what the trail costs, not what
	// subscribing to a guard's events costs.
	var observed atomic.Int64
	observe := func(e idemguard.Event) {
		if e.Kind == idemguard.EventAudit {
			observed.Add(1)
		}
	}
	audited := func(c *idemguard.Config) { c.Audit = idemguard.AuditConfig{Store: true, Observe: true} }
	noCache := func(c *idemguard.Config) { c.ReplayCacheSize = -1 }
	storedOnly := func(c *idemguard.Config) { c.Audit = idemguard.AuditConfig{Store: true} }
	guards := map[string]*idemguard.Guard{}
	for name, mutate := range map[string][]func(*idemguard.Config){
		"off": nil, "on": {audited}, "off-store": {noCache}, "on-store": {noCache, audited}, "stored": {storedOnly},
	} {
		g, err := e.newGuard(func(c *idemguard.Config) {
			c.Observe = observe
			for _, m := range mutate {
				m(c)
			}
		})
		if err != nil {
			return nil, err
		}
		defer closeGuard(g)
		guards[name] = g
	}

	var seq atomic.Int64
	fresh := func(name, baseline string, g *idemguard.Guard) benchCase {
		return benchCase{name: name, baseline: baseline, op: freshDo(g, scopeAuditFresh, "audit-fresh-", &seq)}
	}
	replay := func(name, baseline string, g *idemguard.Guard) benchCase {
		var seq atomic.Int64
		return benchCase{name: name, baseline: baseline, op: func(ctx context.Context) error {
			res, err := g.Do(ctx, auditReplayCall(seq.Add(1)%replayKeys), noop)
			if err != nil {
				return err
			}
			if res.Status != idemguard.StatusSucceeded || !res.Cached {
				return fmt.Errorf("succeeded key answered status %s cached %t, want a replay", res.Status, res.Cached)
			}
			return nil
		}}
	}
	floor := benchCase{name: "raw-insert-update", op: rawInsertUpdate(e, scopeAuditFresh, body)}
	preparedOp, closePrepared, err := rawInsertUpdatePrepared(ctx, e, scopeAuditFresh, body)
	if err != nil {
		return nil, err
	}
	defer closePrepared()
	prepared := benchCase{name: "raw-insert-update-prepared", op: preparedOp}
	freshOff := fresh("fresh-audit-off", floor.name, guards["off"])
	freshOn := fresh("fresh-audit-on", freshOff.name, guards["on"])
	freshOn.targetRatio = auditFreshTarget
	storeOff := replay("replay-store-audit-off", "", guards["off-store"])
	storeOn := replay("replay-store-audit-on", storeOff.name, guards["on-store"])
	cachedOff := replay("replay-cached-audit-off", "", guards["off"])
	cachedOn := replay("replay-cached-audit-on", cachedOff.name, guards["on"])
	cachedStored := replay("replay-cached-audit-stored", cachedOff.name, guards["stored"])

	var rows []row
	for _, c := range e.opts.concurrency {
		r, err := e.compare(ctx, "audit", c, floor, prepared, freshOff, freshOn)
		if err != nil {
			return nil, err
		}
		noteFloor(r, floor.name, freshOn.name)
		notePreparedFloor(r, prepared.name, freshOn.name)
		rows = append(rows, r...)
		for _, group := range [][]benchCase{{storeOff, storeOn}, {cachedOff, cachedOn, cachedStored}} {
			r, err := e.compare(ctx, "audit", c, group...)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r...)
		}
	}
	if observed.Load() == 0 {
		return nil, fmt.Errorf("the audited guards observed no event")
	}
	return rows, nil
}

// noteFloor notes on rows' case named on its throughput ratio to the case
// named floor (one concurrency's rows), against auditFreshTarget.
func noteFloor(rows []row, floor, on string) {
	o, x, ok := ratioTo(rows, floor, on)
	if !ok {
		return
	}
	verdict := "ok"
	if x < auditFreshTarget {
		verdict = "MISS"
	}
	o.Note = fmt.Sprintf("vs %s = %.2f (target >= %.2f) %s", floor, x, auditFreshTarget, verdict)
}

// notePreparedFloor adds to the note of rows' case named on its throughput
// ratio to the floor with prepared statements (reported, no target): the
// store prepares its claim and completion, the target's floor sends text.
func notePreparedFloor(rows []row, floor, on string) {
	if o, x, ok := ratioTo(rows, floor, on); ok {
		o.Note += fmt.Sprintf("; vs %s = %.2f (reported)", floor, x)
	}
}

// ratioTo is rows' case named on and its throughput ratio to the case
// named floor; ok is false when either is missing or the floor ran nothing.
func ratioTo(rows []row, floor, on string) (o *row, x float64, ok bool) {
	var f *row
	for i := range rows {
		switch rows[i].Case {
		case floor:
			f = &rows[i]
		case on:
			o = &rows[i]
		}
	}
	if f == nil || o == nil || f.OpsPerSec <= 0 {
		return nil, 0, false
	}
	return o, o.OpsPerSec / f.OpsPerSec, true
}
