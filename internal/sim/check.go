package sim

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/blockedscan"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// Violation kinds: each is one promise of the guard, as a history can show it broken.
const (
	// Two executions of one key overlapped in time.
	VOverlap = "overlap"
	// An operation ran without its call holding a claim on the row.
	VUnclaimed = "execution-without-claim"
	// An operation was still running when its row could be judged stale (its last
	// heartbeat older than its lease, on the store's clock): a takeover could run it twice.
	VLease = "execution-past-lease"
	// A second execution the rules do not allow: a takeover under policy fail, a retry of a
	// final failure, or more executions than MaxAttempts.
	VSecondExecution = "second-execution-not-allowed"
	// A caller got an answer that is neither the stored answer nor an explicit
	// not-stored, in-progress or store-error outcome.
	VAnswer = "answer"
	// A replay differs from the stored answer, byte for byte.
	VReplay = "replay-differs"
	// A succeeded row was written twice.
	VOverwrite = "overwrite"
	// A claim whose caller was told that nothing ran was taken over, abandoned, or left behind.
	VBurntAttempt = "attempt-burnt"
	// A row is left started with no living owner after the faults stopped.
	VOrphan = "orphan-row"
	// A caller was told its claim was lost while the row still held it.
	VFalseLostClaim = "false-lost-claim"
	// A commit gave up while the lease still held (the result was dropped needlessly).
	VCommitGaveUp = "commit-gave-up-early"
	// A call on a living replica never returned.
	VHung = "call-never-returned"
	// The store's statements are not linearizable against the row model.
	VLinearizability = "not-linearizable"
	// The audit trail disagrees with the row changes: an execution whose claim has no
	// durable event, an applied write whose event is missing, or an event of a write
	// that did not apply.
	VAudit = "audit-trail"
	// A streamed call answered with a success got other events than the ones the execution
	// that stored the answer emitted, in order.
	VStream = "stream-differs"
	// An execution's attempt was given back (its failure stored as cancelled) though no
	// cancel of its claim was recorded.
	VGiveBack = "attempt-given-back"
	// An event relayed to a streamed caller, or stored in a row's event sequence, holds a
	// blocked member (sanitize.IsBlockedKey) in a JSON document of its data.
	VBlocked = "blocked-member-kept"
	// A call that began after a reset (or a forced answer) returned got the answer the reset
	// (or the forced run) ended: a replica replayed it from its cache or a read that raced.
	VResetReplay = "reset-answer-replayed"
)

// Violation is one broken promise in a history.
type Violation struct {
	Kind   string
	Key    string
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s [%s]: %s", v.Kind, shortKey(v.Key), v.Detail)
}

func shortKey(k string) string {
	if len(k) > 40 {
		return k[:40]
	}
	return k
}

// leaseMargin is the engine's margin (an owner cancels its operation this long before its
// lease ends), restated for the checker.
func leaseMargin(lease time.Duration) time.Duration {
	return min(max(lease/10, 100*time.Millisecond), lease/3)
}

// finalStop are the stop reasons of a failure that is never retried.
var finalStop = map[sanitize.StopReason]bool{sanitize.Abandoned: true, sanitize.RetryLimit: true, sanitize.InvalidInput: true}

type checker struct {
	h       *History
	ops     []StoreOp
	execs   []Execution
	answers []Answer
	out     []Violation
	// nonceCall maps a claim nonce to the call that wrote it.
	nonceCall map[string]int
	// execOf maps a call to its execution (a call runs the operation at most once).
	execOf  map[int]*Execution
	nonce   map[*Execution]string
	claimOp map[string]*StoreOp // nonce → the applied claim write that set it
	byKey   map[string][]*StoreOp
}

func (c *checker) add(kind, key, format string, args ...any) {
	c.out = append(c.out, Violation{Kind: kind, Key: key, Detail: fmt.Sprintf(format, args...)})
}

// A note on order: an operation's Seq0 and Seq1 bracket its effect. "o may have taken
// effect before x" is o.Seq0 < x, "o surely took effect before x" is o.Seq1 < x. A check
// that looks for something that must exist uses the first; a check that uses something as
// evidence of a violation uses the second.

// Check holds a history to the guard's promises and returns every violation found (none:
// the history is one the guard allows). It does not check linearizability
// (CheckLinearizable does).
func Check(h *History) []Violation {
	ops, execs, answers := h.snapshot()
	c := &checker{h: h, ops: ops, execs: execs, answers: answers, nonceCall: map[string]int{},
		execOf: map[int]*Execution{}, nonce: map[*Execution]string{}, claimOp: map[string]*StoreOp{},
		byKey: map[string][]*StoreOp{}}
	for i := range c.ops {
		o := &c.ops[i]
		c.byKey[o.Key] = append(c.byKey[o.Key], o)
		if (o.Kind == KindClaim || o.Kind == KindReclaim) && o.CallID >= 0 {
			c.nonceCall[o.Nonce] = o.CallID
			if o.Applied() {
				c.claimOp[o.Nonce] = o
			}
		}
	}
	for i := range c.execs {
		e := &c.execs[i]
		if e.End.IsZero() {
			if at, ok := h.Crashed[e.Replica]; ok {
				e.End = at
			}
		}
		c.execOf[e.CallID] = e
		c.nonce[e] = c.nonceOf(e)
	}
	c.overlaps()
	c.leases()
	c.secondExecutions()
	c.answersHold()
	c.burnt()
	c.orphans()
	c.streams()
	c.blockedKept()
	c.giveBacks()
	c.resetReplays()
	if h.Trail != nil {
		c.trail()
	}
	return c.out
}

// streams checks that every streamed call answered with a success (fresh, followed live,
// or replayed) delivered exactly the events of the execution whose answer it got, the one
// its body names (data.call, data.chunks), in order; an answer stored without events (by a
// plain call, or a sequence over MaxStreamBytes, replayed) is its one rendered event: the
// document itself for a key that keeps documents. A caller that hung up is not written to
// any more, and is not checked.
func (c *checker) streams() {
	streamed := map[int]bool{}
	for i := range c.answers {
		streamed[c.answers[i].CallID] = c.answers[i].Stream
	}
	for i := range c.answers {
		a := &c.answers[i]
		if !a.Stream || a.Gone || a.Err != nil || a.Result.Status != idemguard.StatusSucceeded || c.lost(a) {
			continue
		}
		var body struct {
			Data struct {
				Call   *int `json:"call"`
				Chunks int  `json:"chunks"`
			} `json:"data"`
		}
		if err := json.Unmarshal(a.Result.Body, &body); err != nil || body.Data.Call == nil {
			c.add(VStream, a.Key, "call %d: a streamed success whose body names no execution: %s", a.CallID, a.Result.Body)
			continue
		}
		e := c.execOf[*body.Data.Call]
		want := streamEvents(*body.Data.Call, max(body.Data.Chunks, 2), e != nil && e.Documents)
		notStored := !storedWhole(want, c.h.Limits.MaxStreamBytes)
		if !streamed[*body.Data.Call] || notStored && a.Origin == idemguard.StreamReplayed {
			// Stored without events: its envelope rendered by Replay, or its document.
			want = []string{fmt.Sprintf("%d:env", *body.Data.Call)}
			if c.h.Keys[a.Key].Keep {
				want = []string{string(a.Result.Body)}
			}
		}
		if !slices.Equal(a.Events, want) {
			c.add(VStream, a.Key, "call %d (cached %t) got events %q, want %q", a.CallID, a.Result.Cached, a.Events, want)
		}
	}
}

// blockedKept checks that no event a streamed caller got (whatever its call's outcome)
// and no event of a row's stored sequence holds a blocked member at any depth of a JSON
// document its data holds: read as a sequence of documents, or line by line.
func (c *checker) blockedKept() {
	for i := range c.answers {
		a := &c.answers[i]
		for _, e := range a.Events {
			if name := blockedscan.Member([]byte(e), false); name != "" {
				c.add(VBlocked, a.Key, "call %d got an event holding the blocked member %q: %q", a.CallID, name, e)
				break
			}
		}
	}
	for _, r := range c.h.Final {
		for _, data := range eventData(r.Events) {
			if name := blockedscan.Member(data, false); name != "" {
				c.add(VBlocked, KeyOf(r.Tenant, r.Scope, r.KeyHash), "row %d stores an event holding the blocked member %q: %q", r.ID, name, data)
				break
			}
		}
	}
}

// eventData splits a stored sequence of server-sent events into each event's data (its
// data: lines joined by line ends).
func eventData(wire []byte) [][]byte {
	var out [][]byte
	for block := range bytes.SplitSeq(wire, []byte("\n\n")) {
		var lines [][]byte
		for line := range bytes.SplitSeq(block, []byte("\n")) {
			if d, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				lines = append(lines, bytes.TrimPrefix(d, []byte(" ")))
			}
		}
		if lines != nil {
			out = append(out, bytes.Join(lines, []byte("\n")))
		}
	}
	return out
}

// trail holds the audit trail to the row changes: every write that applied carried its
// event into the trail, no write that surely did not apply did, and every execution ran
// under a claim whose event is there. A write whose outcome is unknown may go either way.
func (c *checker) trail() {
	in := map[string]bool{}
	for _, e := range c.h.Trail {
		in[e.ID] = true
	}
	carried := map[string]bool{}
	for i := range c.ops {
		o := &c.ops[i]
		if o.AuditID == "" {
			continue
		}
		carried[o.AuditID] = true
		switch {
		case o.Applied() && !in[o.AuditID]:
			c.add(VAudit, o.Key, "a %s that applied at %s is not in the audit trail", o.Kind, o.Return.Format(timeFmt))
		case !o.MayHaveApplied() && in[o.AuditID]:
			c.add(VAudit, o.Key, "a %s that did not apply (at %s) is in the audit trail", o.Kind, o.Return.Format(timeFmt))
		}
	}
	for _, e := range c.h.Trail {
		if e.Kind.Durable() && !carried[e.ID] {
			c.add(VAudit, "", "durable event %s %s was carried by no write", e.Kind, e.ID)
		}
	}
	for e, n := range c.nonce {
		if o := c.claimOp[n]; n != "" && o != nil && !in[o.AuditID] {
			c.add(VAudit, e.Key, "call %d ran under a claim whose event is not in the audit trail", e.CallID)
		}
	}
}

// lost reports whether a's replica crashed before a returned.
func (c *checker) lost(a *Answer) bool {
	at, crashed := c.h.Crashed[a.Replica]
	return crashed && (a.End.IsZero() || !a.End.Before(at))
}

// nonceOf is the claim e ran under: the latest claim write of its call that applied, or that
// a read of its call showed on the row, before e started.
func (c *checker) nonceOf(e *Execution) string {
	mine := func(n string) bool { cl, ok := c.nonceCall[n]; return ok && cl == e.CallID }
	var nonce string
	var at int64
	for i := range c.ops {
		o := &c.ops[i]
		if o.Key != e.Key || o.Seq1 >= e.Seq0 {
			continue
		}
		switch {
		case (o.Kind == KindClaim || o.Kind == KindReclaim) && o.CallID == e.CallID && o.Applied():
		case o.Kind == KindGet && o.Err == nil && !o.NotFound && o.Rec.Status == store.RowStarted && mine(o.Rec.ClaimNonce):
		default:
			continue
		}
		if o.Seq1 > at {
			at = o.Seq1
			nonce = o.Nonce
			if o.Kind == KindGet {
				nonce = o.Rec.ClaimNonce
			}
		}
	}
	if nonce == "" {
		c.add(VUnclaimed, e.Key, "call %d ran the operation at %s without a claim of its own on the row", e.CallID, e.Start.Format(timeFmt))
	}
	return nonce
}

const timeFmt = "15:04:05.000000"

func end(e *Execution) time.Time {
	if e.End.IsZero() {
		return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return e.End
}

func (c *checker) overlaps() {
	for i := range c.execs {
		a := &c.execs[i]
		for j := i + 1; j < len(c.execs); j++ {
			b := &c.execs[j]
			if a.Key != b.Key || !a.Start.Before(end(a)) || !b.Start.Before(end(b)) {
				continue
			}
			if a.Start.Before(end(b)) && b.Start.Before(end(a)) {
				c.add(VOverlap, a.Key, "call %d ran [%s, %s] and call %d ran [%s, %s]", a.CallID, a.Start.Format(timeFmt),
					end(a).Format(timeFmt), b.CallID, b.Start.Format(timeFmt), end(b).Format(timeFmt))
			}
		}
	}
}

func (c *checker) storeTime(t time.Time) time.Time {
	if c.h.StoreTime == nil {
		return t
	}
	return c.h.StoreTime(t)
}

// leases checks that every execution stayed within its lease: at every instant of its run
// the row's last heartbeat under its nonce was younger than the lease, on the store's clock.
func (c *checker) leases() {
	for i := range c.execs {
		e := &c.execs[i]
		n := c.nonce[e]
		spec, ok := c.h.Keys[e.Key]
		if n == "" || !ok || e.End.IsZero() {
			continue
		}
		var stamps []time.Time // store time at which each renewal of n had surely landed
		for _, o := range c.byKey[e.Key] {
			if !o.Applied() || o.Nonce != n || o.Seq0 > e.Seq1 {
				continue
			}
			switch o.Kind {
			case KindClaim, KindReclaim, KindHeartbeat:
				stamps = append(stamps, c.storeTime(o.Return))
			}
		}
		if len(stamps) == 0 {
			continue // reported as VUnclaimed
		}
		slices.SortFunc(stamps, func(a, b time.Time) int { return a.Compare(b) })
		start, stop := c.storeTime(e.Start), c.storeTime(e.End)
		// The row may be judged stale at stamp + lease. The owner promises to stop
		// leaseMargin before that, counted from the renewal's start; with StrictLease the
		// checker holds it to half its margin (the other half is for the store clock's
		// steps), else to the lease itself.
		lease := spec.Lease
		if c.h.Limits.StrictLease {
			lease -= leaseMargin(spec.Lease) / 2
		}
		for k, st := range stamps {
			if !st.Before(stop) {
				break
			}
			limit := st.Add(lease)
			next := stop
			if k+1 < len(stamps) && stamps[k+1].Before(stop) {
				next = stamps[k+1]
			}
			if limit.After(start) && limit.Before(next) {
				c.add(VLease, e.Key, "call %d ran on past %s (store clock) with its last renewal at %s, older than its lease %s (until %s)",
					e.CallID, limit.Format(timeFmt), st.Format(timeFmt), spec.Lease, next.Format(timeFmt))
			}
		}
	}
}

// secondExecutions checks why each execution after a key's first was allowed.
func (c *checker) secondExecutions() {
	byKey := map[string][]*Execution{}
	for i := range c.execs {
		e := &c.execs[i]
		byKey[e.Key] = append(byKey[e.Key], e)
	}
	for key, execs := range byKey {
		spec, ok := c.h.Keys[key]
		if !ok {
			continue
		}
		slices.SortFunc(execs, func(a, b *Execution) int { return cmp.Compare(a.Seq0, b.Seq0) })
		count := 0
		for _, e := range execs {
			w := c.claimOp[c.nonce[e]]
			if w == nil {
				continue
			}
			forced := false
			switch {
			case w.Kind == KindClaim || w.Reclaim == store.ReclaimExpired:
				count = 0 // a new first attempt
			case w.Reclaim == store.ReclaimStale && spec.Policy == idemguard.StaleFail:
				c.add(VSecondExecution, key, "call %d took over a stale claim under policy fail", e.CallID)
			case w.Reclaim == store.ReclaimFailed:
				if f := c.lastFailure(key, w.Seq0, true); f != "" && finalStop[f] {
					c.add(VSecondExecution, key, "call %d retried a final failure (%s)", e.CallID, f)
				}
			case w.Reclaim == store.ReclaimForced && spec.AllowReset:
				count = w.OldAttempts // run again on request, as the next attempt, past MaxAttempts if need be
				forced = true
			case w.Reclaim == store.ReclaimForced:
				c.add(VSecondExecution, key, "call %d forced a run of a scope that does not allow it", e.CallID)
			}
			count++
			if count > spec.MaxAttempts && !forced {
				c.add(VSecondExecution, key, "call %d is execution %d of at most %d", e.CallID, count, spec.MaxAttempts)
			}
			if c.canceled(e) {
				count-- // stopped on request: its attempt was given back
			}
		}
	}
}

// canceled reports whether e's claim was completed as cancelled (the attempt given back)
// after a cancel of it was recorded.
func (c *checker) canceled(e *Execution) bool {
	n := c.nonce[e]
	for _, o := range c.byKey[e.Key] {
		if o.Kind == KindComplete && o.Nonce == n && o.Canceled && o.MayHaveApplied() && c.cancelRecorded(o) {
			return true
		}
	}
	return false
}

// surelyStored reports whether a commit of e's claim surely applied.
func (c *checker) surelyStored(e *Execution) bool {
	n := c.nonce[e]
	for _, o := range c.byKey[e.Key] {
		if o.Kind == KindComplete && o.Nonce == n && o.Applied() {
			return true
		}
	}
	return false
}

// cancelRecorded reports whether a cancel of the claim that complete wrote may have been
// recorded before it.
func (c *checker) cancelRecorded(complete *StoreOp) bool {
	for _, o := range c.byKey[complete.Key] {
		if o.Kind == KindCancel && o.Nonce == complete.Nonce && o.MayHaveApplied() && o.Seq0 < complete.Seq1 {
			return true
		}
	}
	return false
}

// giveBacks checks that only a recorded cancel gives an attempt back: a completion that
// applied as cancelled had a cancel of its claim recorded before it.
func (c *checker) giveBacks() {
	for i := range c.ops {
		o := &c.ops[i]
		if o.Kind == KindComplete && o.Canceled && o.Applied() && !c.cancelRecorded(o) {
			c.add(VGiveBack, o.Key, "call %d's failure was stored as cancelled, its attempt given back, but no cancel of its claim was recorded",
				c.nonceCall[o.Nonce])
		}
	}
}

// lastFailure is the stop reason of the last failure written to key that may have taken
// effect before seq (surely: that surely did).
func (c *checker) lastFailure(key string, seq int64, surely bool) sanitize.StopReason {
	var r sanitize.StopReason
	for _, o := range c.byKey[key] {
		if o.Seq0 > seq || surely && (o.Seq1 > seq || !o.Applied()) || !o.MayHaveApplied() {
			continue
		}
		if o.Kind == KindAbandon || (o.Kind == KindComplete && o.Status == store.RowFailed) {
			if env, err := sanitize.FromJSON(o.Response); err == nil {
				r = env.StopReason
			}
		}
	}
	return r
}

// committed lists the successes that may have been stored for key before seq: those that
// surely landed, and those whose outcome is unknown.
func (c *checker) committed(key string, seq int64) []*StoreOp {
	var out []*StoreOp
	for _, o := range c.byKey[key] {
		if o.Kind == KindComplete && o.Status == store.RowSucceeded && o.MayHaveApplied() && o.Seq0 < seq {
			out = append(out, o)
		}
	}
	return out
}

// movedOff reports whether a write other than a commit under n moved the row off claim n
// before seq.
func (c *checker) movedOff(key, n string, seq int64) bool {
	for _, o := range c.byKey[key] {
		if o.Seq0 > seq || !o.MayHaveApplied() {
			continue
		}
		switch {
		case (o.Kind == KindReclaim || o.Kind == KindAbandon || o.Kind == KindReset) && o.OldNonce == n:
			return true
		case o.Kind == KindRelease && o.Nonce == n:
			return true
		}
	}
	return false
}

func (c *checker) answersHold() {
	succeeded := map[string]int{}
	for _, o := range c.ops {
		if o.Kind == KindClaim && o.Applied() || o.Kind == KindReclaim && o.Applied() && o.Reclaim == store.ReclaimExpired {
			succeeded[o.Key] = 0
		}
		if o.Kind == KindReclaim && o.Applied() && o.Reclaim == store.ReclaimForced && c.h.Keys[o.Key].AllowReset {
			succeeded[o.Key] = 0 // a forced run replaces the stored success on request
		}
		if o.Kind == KindComplete && o.Status == store.RowSucceeded && o.Applied() {
			succeeded[o.Key]++
			if succeeded[o.Key] > 1 {
				c.add(VOverwrite, o.Key, "a second success was stored (call %d)", o.CallID)
			}
		}
	}
	for i := range c.answers {
		a := &c.answers[i]
		if c.lost(a) {
			continue
		}
		if a.End.IsZero() {
			c.add(VHung, a.Key, "call %d on replica %d never returned", a.CallID, a.Replica)
			continue
		}
		e := c.execOf[a.CallID]
		r := a.Result
		switch {
		case a.Err != nil:
			if !errors.Is(a.Err, idemguard.ErrStoreUnavailable) {
				c.add(VAnswer, a.Key, "call %d got an error that is not a store error: %v", a.CallID, a.Err)
			}
			if e != nil {
				c.add(VAnswer, a.Key, "call %d was told the store failed (%v), but its operation ran", a.CallID, a.Err)
			}
			if a.Probe {
				c.add(VOrphan, a.Key, "the probe after the faults got a store error: %v", a.Err)
			}
		case r.Status == idemguard.StatusInProgress:
			if a.Probe {
				c.add(VOrphan, a.Key, "the probe after the faults was told in progress: a row is started with no living owner")
			}
		case a.Origin == idemguard.StreamAttached && r.Status == idemguard.StatusFailed && !r.Cached:
			c.followedFailure(a)
		case !r.Cached:
			c.fresh(a, e)
		case r.Status == idemguard.StatusSucceeded:
			c.replay(a)
		case r.Status == idemguard.StatusFailed:
			if c.lastFailure(a.Key, a.Seq1, false) == "" {
				c.add(VAnswer, a.Key, "call %d was answered with a stored failure, but none was stored", a.CallID)
			}
		default:
			c.add(VAnswer, a.Key, "call %d got status %q", a.CallID, r.Status)
		}
	}
}

// followedFailure checks the failure a streamed call got from the live stream it followed:
// another call's execution of the key failed (or was cut off) while the follower waited,
// succeeded with a sequence too long to be stored, which a follower that fell behind cannot
// complete, or succeeded without its answer being stored (its claim was taken over first),
// so that the row cannot complete the stream.
func (c *checker) followedFailure(a *Answer) {
	for _, o := range c.byKey[a.Key] {
		ended := o.Kind == KindReclaim && o.Reclaim == store.ReclaimForced || o.Kind == KindReset
		if ended && o.MayHaveApplied() && o.Seq0 < a.Seq1 && o.Seq1 > a.Seq0 {
			return // a forced run or a reset ended the answer it followed before it could read it back
		}
	}
	for i := range c.execs {
		e := &c.execs[i]
		if e.Key != a.Key || e.CallID == a.CallID || e.Seq0 >= a.Seq1 || e.End.IsZero() || e.End.After(a.End) {
			continue
		}
		if e.Failed || e.Cut || e.Events > 0 && !storedWhole(streamEvents(e.CallID, e.Events, e.Documents), c.h.Limits.MaxStreamBytes) ||
			!c.surelyStored(e) {
			return
		}
	}
	c.add(VAnswer, a.Key, "call %d followed a live stream and was told it failed, but no execution it could follow failed", a.CallID)
}

// fresh checks the answer of a call that says it ran the operation.
func (c *checker) fresh(a *Answer, e *Execution) {
	r := a.Result
	if e == nil {
		c.add(VAnswer, a.Key, "call %d got a fresh %s answer, but its operation never ran", a.CallID, r.Status)
		return
	}
	n := c.nonce[e]
	var commit *StoreOp
	for _, o := range c.byKey[a.Key] {
		// An abandon of this claim that wrote the very failure the owner was committing
		// (an owner cut off by its lease under policy fail stores "abandoned" too) is the
		// same row: the engine rightly reads it as its own outcome.
		same := o.Kind == KindAbandon && o.OldNonce == n && bytes.Equal(o.Response, r.Body) && o.Code == r.StatusCode
		if (o.Kind == KindComplete && o.Nonce == n || same) && o.MayHaveApplied() && o.Seq0 < a.Seq1 {
			commit = o
		}
	}
	switch {
	case r.LostClaim:
		// LostClaim says "not known to be stored": a commit whose reply was lost may have
		// landed before the row was retried or taken over, and the row cannot tell.
		if n != "" && !c.movedOff(a.Key, n, a.Seq1) {
			c.add(VFalseLostClaim, a.Key, "call %d was told its claim was lost, but no other writer had moved the row off it", a.CallID)
		}
	case !r.CompletedAt.IsZero():
		if commit == nil {
			c.add(VAnswer, a.Key, "call %d was told its result was stored, but no commit of its claim landed", a.CallID)
		} else if !bytes.Equal(storedBody(commit.Response), r.Body) || commit.Code != r.StatusCode {
			c.add(VAnswer, a.Key, "call %d got %d %s, but %d %s was stored", a.CallID, r.StatusCode, r.Body, commit.Code, commit.Response)
		}
	default:
		c.gaveUp(a, e, n)
	}
	if r.Status == idemguard.StatusSucceeded && e.Body != nil && c.h.Keys[a.Key].Keep {
		if want, err := keep.Document(e.Body, nil); err != nil || !bytes.Equal(want, r.Body) {
			c.add(VAnswer, a.Key, "call %d got %s, but its operation answered %s (kept: %v)", a.CallID, r.Body, want, err)
		}
	} else if r.Status == idemguard.StatusSucceeded && e.Body != nil {
		if body, err := sanitize.FromValue(e.Body); err == nil {
			if want, err := sanitize.Marshal(body); err == nil && !bytes.Equal(want, r.Body) {
				c.add(VAnswer, a.Key, "call %d got %s, but its operation answered %s", a.CallID, r.Body, want)
			}
		}
	}
}

// gaveUp checks a result that was not stored although the claim was not lost: the commit
// must have kept trying while the lease held (and for at most one lease length).
func (c *checker) gaveUp(a *Answer, e *Execution, n string) {
	spec, ok := c.h.Keys[a.Key]
	if !ok || n == "" {
		return
	}
	// The lease counts from the start of the last renewal the owner knows landed. The claim
	// is the first: the engine counts it from the first write that carried the nonce (an
	// INSERT and a guarded UPDATE of one round share it), which is never later than the one
	// that landed.
	from := c.h.firstClaim(n)
	for _, o := range c.byKey[a.Key] {
		if o.Nonce == n && o.Kind == KindHeartbeat && o.SeenAt.Before(a.End) && o.SeenOK && o.SeenErr == nil && o.Sent.After(from) {
			from = o.Sent
		}
	}
	lease := from.Add(spec.Lease - leaseMargin(spec.Lease))
	stop := lease
	if giveUp := e.End.Add(spec.Lease); giveUp.Before(stop) {
		stop = giveUp
	}
	if a.End.Add(time.Millisecond).Before(stop) {
		c.add(VCommitGaveUp, a.Key, "call %d gave up storing its result at %s, %s before its lease ended at %s",
			a.CallID, a.End.Format(timeFmt), stop.Sub(a.End), stop.Format(timeFmt))
	}
}

// replay checks a replayed success against the success stored before it: one that may have
// been stored must replay, byte for byte, as the replay does.
func (c *checker) replay(a *Answer) {
	r := a.Result
	commits := c.committed(a.Key, a.Seq1)
	if len(commits) == 0 {
		c.add(VAnswer, a.Key, "call %d was replayed a success, but none was stored", a.CallID)
		return
	}
	var want []byte
	var code int
	for _, commit := range commits {
		if doc, ok := storedDocument(commit.Response); ok {
			if want, code = doc, cmp.Or(commit.Code, http.StatusOK); bytes.Equal(want, r.Body) && code == r.StatusCode {
				return
			}
			continue
		}
		env, err := sanitize.FromJSON(commit.Response)
		if err != nil {
			c.add(VReplay, a.Key, "the stored answer does not decode: %v", err)
			return
		}
		env.Cached = true
		if want, err = sanitize.Marshal(env); err != nil {
			c.add(VReplay, a.Key, "the stored answer does not encode: %v", err)
			return
		}
		if code = cmp.Or(commit.Code, http.StatusOK); bytes.Equal(want, r.Body) && code == r.StatusCode {
			return
		}
	}
	c.add(VReplay, a.Key, "call %d was replayed %d %s; the stored answer replays as %d %s",
		a.CallID, r.StatusCode, r.Body, code, want)
}

// burnt checks that every claim of a call told nothing ran was given back: the first write
// that moved the row off it must be its release (or an expiry), never a takeover or an
// abandon, and it must not be left on the row.
func (c *checker) burnt() {
	for i := range c.answers {
		a := &c.answers[i]
		if c.lost(a) || a.End.IsZero() || c.execOf[a.CallID] != nil {
			continue
		}
		if _, crashed := c.h.Crashed[a.Replica]; crashed {
			// The release runs in the background of the replica that answered; a replica
			// that dies takes it along, and its claim is taken over once stale, as any
			// crashed owner's is.
			continue
		}
		for _, w := range c.byKey[a.Key] {
			if (w.Kind != KindClaim && w.Kind != KindReclaim) || w.CallID != a.CallID || !w.Applied() {
				continue
			}
			c.givenBack(a, w)
		}
	}
}

func (c *checker) givenBack(a *Answer, w *StoreOp) {
	for _, o := range c.byKey[a.Key] {
		if o.Seq0 <= w.Seq1 || !o.MayHaveApplied() {
			continue
		}
		switch {
		case o.Kind == KindRelease && o.Nonce == w.Nonce:
			return
		case !o.Applied():
			continue // an unknown outcome is no evidence of a takeover
		case o.Kind == KindReclaim && o.OldNonce == w.Nonce && o.Reclaim == store.ReclaimExpired:
			return
		case (o.Kind == KindReclaim || o.Kind == KindAbandon) && o.OldNonce == w.Nonce && !c.couldRelease(a, w, o):
			return
		case o.Kind == KindReclaim && o.OldNonce == w.Nonce:
			c.add(VBurntAttempt, a.Key, "call %d was told nothing ran (%s), yet its claim was taken over by call %d: an attempt burnt",
				a.CallID, outcome(a), o.CallID)
			return
		case o.Kind == KindAbandon && o.OldNonce == w.Nonce:
			c.add(VBurntAttempt, a.Key, "call %d was told nothing ran (%s), yet its claim was marked abandoned", a.CallID, outcome(a))
			return
		case o.Kind == KindComplete && o.Nonce == w.Nonce:
			c.add(VAnswer, a.Key, "call %d was told nothing ran (%s), yet a result was committed under its claim", a.CallID, outcome(a))
			return
		}
	}
	c.add(VBurntAttempt, a.Key, "call %d was told nothing ran (%s), yet its claim was never given back", a.CallID, outcome(a))
}

// pollBound is how long after a claim lands (and its call has answered) the engine's
// background task may take to give it back: its pause between reads grows to at most a
// second, then one read and one release, each bounded by the store timeout; and some slack.
func (c *checker) pollBound() time.Duration {
	return time.Second + 2*c.h.Limits.StoreTimeout + 250*time.Millisecond
}

// couldRelease reports whether a's replica had every chance to give claim w back before o
// took the row, and did not even try: no release of it was sent before o, and from the
// moment w had landed and a had answered, the replica could reach the store (no outage,
// pause or crash of its plan) for longer than pollBound. The background task's reads are
// spared the per-call faults (Faults), so only the plan's windows can keep it from seeing
// the claim; a release it sent that failed or landed late is the store's doing, not the
// engine's.
func (c *checker) couldRelease(a *Answer, w, o *StoreOp) bool {
	if c.h.releaseTried(w.Nonce, o.Return) {
		return false
	}
	from := w.Return
	if a.End.After(from) {
		from = a.End
	}
	if c.h.ReachableFrom != nil {
		from = c.h.ReachableFrom(a.Replica, from, o.Call)
	}
	return o.Call.Sub(from) > c.pollBound()
}

func outcome(a *Answer) string {
	if a.Err != nil {
		return a.Err.Error()
	}
	if a.Result.Cached {
		return string(a.Result.Status) + ", cached"
	}
	return string(a.Result.Status)
}

// orphans checks the rows left when the run ended: none may be started, since every call
// has returned and the probes have run.
func (c *checker) orphans() {
	for _, r := range c.h.Final {
		if r.Status == store.RowStarted {
			c.add(VOrphan, KeyOf(r.Tenant, r.Scope, r.KeyHash), "row %d is left started (attempt %d) with no living owner", r.ID, r.Attempts)
		}
	}
}

// storedDocument returns the document a stored response holds (Call.Keep), as the engine
// stores it: {"body": "<the document's bytes>", ...}; ok is false for an envelope.
func storedDocument(resp []byte) (doc []byte, ok bool) {
	var w struct {
		Body json.RawMessage `json:"body"`
	}
	if json.Unmarshal(resp, &w) != nil || len(w.Body) == 0 || w.Body[0] != '"' {
		return nil, false
	}
	var s string
	if json.Unmarshal(w.Body, &s) != nil {
		return nil, false
	}
	return []byte(s), true
}

// storedBody is what a stored response answers: its document, or the envelope as stored.
func storedBody(resp []byte) []byte {
	if doc, ok := storedDocument(resp); ok {
		return doc
	}
	return resp
}
