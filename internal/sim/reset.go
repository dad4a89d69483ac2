package sim

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/store"
)

// Resets: resetters (Guard.Reset) and forcers (Call.ForceNew) of keys whose scope allows
// them (KeySpec.AllowReset), and the invariant they are held to: once a reset or a forced
// answer has returned, no call that begins later is answered with the answer it ended
// (VResetReplay), whatever replica's replay cache held it and whatever read raced it.

// ResetCall is one Guard.Reset call of a resetter.
type ResetCall struct {
	Seq0, Seq1 int64
	CallID     int
	Key        string
	Replica    int
	Err        error
}

// BeginReset records the start of a reset call.
func (h *History) BeginReset(callID int, key string, replica int) *ResetCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	rc := &ResetCall{Seq0: h.next(), CallID: callID, Key: key, Replica: replica}
	h.Resets = append(h.Resets, rc)
	return rc
}

// FinishReset records what a reset call returned.
func (h *History) FinishReset(rc *ResetCall, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rc.Seq1, rc.Err = h.next(), err
}

func (h *History) resets() []ResetCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]ResetCall, len(h.Resets))
	for i, rc := range h.Resets {
		out[i] = *rc
	}
	return out
}

// addResets gives, for about a third of the seeds (their own random stream, so every
// earlier choice of a seed stays what it was), every key a scope that allows resets and one
// or two resetters and forcers, spread over the replicas and the run. They are Added: Sync
// leaves them out.
func (sc *Scenario) addResets(rs *rand.Rand) {
	if rs.IntN(3) != 0 {
		return
	}
	L := sc.Lease
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rs.Int64N(int64(hi-lo)+1)) }
	for k := range sc.Keys {
		sc.Keys[k].Spec.AllowReset = true
		for range 1 + rs.IntN(2) {
			sc.Clients = append(sc.Clients, Client{Key: k, Replica: rs.IntN(sc.Replicas), At: dur(L/2, 5*L),
				Calls: 1 + rs.IntN(2), Reset: true, Added: true})
			sc.Clients = append(sc.Clients, Client{Key: k, Replica: rs.IntN(sc.Replicas), At: dur(L/2, 5*L),
				Calls: 1 + rs.IntN(2), Wait: dur(0, L), Force: true, Added: true})
		}
		// Readers after them, on every replica, so that a stale cached answer has a caller.
		for r := range sc.Replicas {
			sc.Clients = append(sc.Clients, Client{Key: k, Replica: r, At: dur(3*L, 8*L), Calls: 2, Wait: L, Added: true})
		}
	}
}

// resets makes c.Calls resets of c's key, a lease apart, on c's replica.
func (r *run) resets(c Client) {
	k := r.sc.Keys[c.Key]
	hash := KeyHash(Secret, Tenant, Scope, k.ClientKey, inputs(k))
	for i := range c.Calls {
		r.mu.Lock()
		id := r.nextID
		r.nextID++
		r.mu.Unlock()
		replica := r.living(c.Replica + i)
		g := r.guards[replica]
		ctx, cancel := context.WithTimeout(WithCall(context.Background(), id), r.sc.Lease)
		rc := r.h.BeginReset(id, r.keys[c.Key], replica)
		key, err := g.KeyOfHash(Tenant, Scope, hash)
		if err == nil {
			_, err = g.Reset(ctx, key, settingsOf(k))
		}
		r.h.FinishReset(rc, err)
		cancel()
		time.Sleep(r.sc.Lease)
	}
}

// settingsOf is the settings of every call of k.
func settingsOf(k KeyPlan) idemguard.Settings {
	return idemguard.Settings{TTL: time.Hour, StaleAfter: k.Spec.Lease, MaxAttempts: k.Spec.MaxAttempts,
		StalePolicy: k.Spec.Policy, AllowReset: k.Spec.AllowReset}
}

// resetReplays checks VResetReplay: a reset that returned, or a forced call answered with
// Forced, ended the answer of the execution whose claim it replaced; no call that began
// after it returned may be answered with that execution's answer.
func (c *checker) resetReplays() {
	type ender struct {
		key   string
		seq   int64
		ended int // the call whose execution's answer was ended
		by    string
	}
	var enders []ender
	endedBy := func(kind Kind, reclaim store.ReclaimKind, callID int) (int, bool) {
		for _, o := range c.ops {
			if o.Kind == kind && o.Reclaim == reclaim && o.CallID == callID && o.Applied() {
				call, ok := c.nonceCall[o.OldNonce]
				return call, ok
			}
		}
		return 0, false
	}
	for _, rc := range c.h.resets() {
		if rc.Err == nil && rc.Seq1 > 0 {
			if call, ok := endedBy(KindReset, 0, rc.CallID); ok {
				enders = append(enders, ender{rc.Key, rc.Seq1, call, "reset"})
			}
		}
	}
	for i := range c.answers {
		a := &c.answers[i]
		if a.Err == nil && a.Result.Forced && !c.lost(a) {
			if call, ok := endedBy(KindReclaim, store.ReclaimForced, a.CallID); ok {
				enders = append(enders, ender{a.Key, a.Seq1, call, "forced run"})
			}
		}
	}
	for _, e := range enders {
		for i := range c.answers {
			a := &c.answers[i]
			if a.Key == e.key && a.Seq0 > e.seq && a.Err == nil && answerOf(a) == e.ended {
				c.add(VResetReplay, a.Key, "call %d began after a %s returned and got the answer of call %d that it ended",
					a.CallID, e.by, e.ended)
			}
		}
	}
}

// answerOf is the call whose execution a's success answer came from (-1: none named).
func answerOf(a *Answer) int {
	if a.Result.Status != idemguard.StatusSucceeded {
		return -1
	}
	var body struct {
		Data struct {
			Call *int `json:"call"`
		} `json:"data"`
	}
	if err := json.Unmarshal(a.Result.Body, &body); err != nil || body.Data.Call == nil {
		return -1
	}
	return *body.Data.Call
}
