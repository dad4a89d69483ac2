package sim

import (
	"errors"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// builder writes a history by hand: each step one unit of the sequence, times in
// milliseconds from t0.
type builder struct {
	h   *History
	seq int64
	t0  time.Time
}

const key = "t/s/k"

func newBuilder(lease time.Duration) *builder {
	b := &builder{h: NewHistory(), t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	b.h.SetKey(key, KeySpec{Lease: lease, MaxAttempts: 3, Policy: idemguard.StaleTakeover})
	b.h.Limits.StoreTimeout = 100 * time.Millisecond
	return b
}

func (b *builder) at(ms int) time.Time { return b.t0.Add(time.Duration(ms) * time.Millisecond) }

// op appends a statement that took effect at ms.
func (b *builder) op(ms int, o StoreOp) *StoreOp {
	b.seq += 2
	o.Seq0, o.Seq1 = b.seq-1, b.seq
	o.Call, o.Return, o.Sent, o.SeenAt = b.at(ms), b.at(ms), b.at(ms), b.at(ms)
	o.Key, o.Replica = key, 0
	o.SeenOK = o.OK
	b.h.Ops = append(b.h.Ops, &o)
	switch o.Kind {
	case KindClaim, KindReclaim:
		b.h.nonces[o.Nonce] = o.CallID
		b.h.claims[o.Nonce] = o.Sent
	}
	return b.h.Ops[len(b.h.Ops)-1]
}

func (b *builder) exec(call int, from, to int, body map[string]any) {
	b.seq += 2
	b.h.Execs = append(b.h.Execs, &Execution{Seq0: b.seq - 1, Seq1: b.seq, Key: key, CallID: call,
		Start: b.at(from), End: b.at(to), Body: body})
}

func (b *builder) answer(call int, from, to int, res idemguard.Result, err error) {
	b.seq += 2
	b.h.Answers = append(b.h.Answers, &Answer{Seq0: b.seq - 1, Seq1: b.seq, CallID: call, Key: key,
		Start: b.at(from), End: b.at(to), Result: res, Err: err})
}

func kinds(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Kind)
	}
	return out
}

var okBody = map[string]any{"ok": true, "traceId": "t"}

func body(t *testing.T, cached bool) []byte {
	env, err := sanitize.FromValue(okBody)
	require.NoError(t, err)
	env.Cached = cached
	b, err := sanitize.Marshal(env)
	require.NoError(t, err)
	return b
}

// clean is one call that claims, runs within its lease, commits, and a replay.
func clean(t *testing.T) *builder {
	b := newBuilder(time.Second)
	b.op(0, StoreOp{Kind: KindClaim, CallID: 1, Nonce: "n1", RetID: 7, OK: true})
	b.exec(1, 0, 500, okBody)
	b.op(500, StoreOp{Kind: KindComplete, CallID: 1, ID: 7, Nonce: "n1", Status: store.RowSucceeded, Response: body(t, false), Code: 200, OK: true})
	b.answer(1, 0, 500, idemguard.Result{Status: idemguard.StatusSucceeded, Body: body(t, false), StatusCode: 200, CompletedAt: b.at(500)}, nil)
	b.answer(2, 600, 600, idemguard.Result{Status: idemguard.StatusSucceeded, Cached: true, Body: body(t, true), StatusCode: 200}, nil)
	return b
}

func TestCheckAcceptsACleanHistory(t *testing.T) {
	require.Empty(t, Check(clean(t).h))
	require.Equal(t, porcupine.Ok, CheckLinearizable(clean(t).h, time.Second).Result)
}

func TestCheckFindsOverlappingExecutions(t *testing.T) {
	b := clean(t)
	b.op(100, StoreOp{Kind: KindReclaim, Reclaim: store.ReclaimStale, CallID: 3, ID: 7, Nonce: "n3", OldNonce: "n1", OldAttempts: 1, OK: true})
	b.exec(3, 100, 300, okBody)
	require.Contains(t, kinds(Check(b.h)), VOverlap)
}

func TestCheckFindsAnExecutionPastItsLease(t *testing.T) {
	b := newBuilder(time.Second)
	b.op(0, StoreOp{Kind: KindClaim, CallID: 1, Nonce: "n1", RetID: 7, OK: true})
	b.op(900, StoreOp{Kind: KindHeartbeat, ID: 7, Nonce: "n1", OK: true})
	b.exec(1, 0, 1950, nil) // 50ms past the lease from the last heartbeat at 900
	require.Contains(t, kinds(Check(b.h)), VLease)
	b.h.Execs[0].End = b.at(1850)
	require.NotContains(t, kinds(Check(b.h)), VLease)
	b.h.Limits.StrictLease = true // must stop half the margin (50ms) early: 1850 is fine, 1900 is not
	require.NotContains(t, kinds(Check(b.h)), VLease)
	b.h.Execs[0].End = b.at(1960)
	require.Contains(t, kinds(Check(b.h)), VLease)
}

func TestCheckFindsAReplayThatDiffers(t *testing.T) {
	b := clean(t)
	b.h.Answers[1].Result.Body = []byte(`{"ok":true,"cached":true}`)
	require.Contains(t, kinds(Check(b.h)), VReplay)
}

func TestCheckFindsASecondSuccess(t *testing.T) {
	b := clean(t)
	b.op(700, StoreOp{Kind: KindComplete, CallID: 1, ID: 7, Nonce: "n1", Status: store.RowSucceeded, Response: body(t, false), Code: 200, OK: true})
	require.Contains(t, kinds(Check(b.h)), VOverwrite)
}

func TestCheckFindsAnAttemptBurntByAClaimThatNeverRan(t *testing.T) {
	b := newBuilder(time.Second)
	// The claim landed and its caller knew it (then hung up): it must be given back.
	b.op(0, StoreOp{Kind: KindClaim, CallID: 1, Nonce: "n1", RetID: 7, OK: true})
	b.answer(1, 0, 10, idemguard.Result{}, &idemguard.StoreError{Op: "claim", Err: errors.New("caller hung up")})
	b.op(2000, StoreOp{Kind: KindReclaim, Reclaim: store.ReclaimStale, CallID: 2, ID: 7, Nonce: "n2", OldNonce: "n1", OldAttempts: 1, OK: true})
	require.Contains(t, kinds(Check(b.h)), VBurntAttempt)
	// Not when the replica could not reach the store until just before the takeover.
	b.h.ReachableFrom = func(int, time.Time, time.Time) time.Time { return b.at(1900) }
	require.NotContains(t, kinds(Check(b.h)), VBurntAttempt)
	b.h.ReachableFrom = nil
	// Nor when it sent a release that the store lost.
	b.h.releaseSent("n1", b.at(30))
	require.NotContains(t, kinds(Check(b.h)), VBurntAttempt)

	// Given back first: fine.
	b = newBuilder(time.Second)
	b.op(0, StoreOp{Kind: KindClaim, CallID: 1, Nonce: "n1", RetID: 7, OK: true})
	b.answer(1, 0, 10, idemguard.Result{}, &idemguard.StoreError{Op: "claim", Err: errors.New("caller hung up")})
	b.op(20, StoreOp{Kind: KindRelease, ID: 7, Nonce: "n1", OK: true, CallID: 1})
	require.Empty(t, Check(b.h))
}

func TestCheckFindsAStoreErrorAfterTheOperationRan(t *testing.T) {
	b := newBuilder(time.Second)
	b.op(0, StoreOp{Kind: KindClaim, CallID: 1, Nonce: "n1", RetID: 7, OK: true})
	b.exec(1, 0, 100, okBody)
	b.answer(1, 0, 200, idemguard.Result{}, &idemguard.StoreError{Op: "commit", Err: errors.New("down")})
	require.Contains(t, kinds(Check(b.h)), VAnswer)
}

func TestCheckFindsAFalseLostClaim(t *testing.T) {
	b := newBuilder(time.Second)
	b.op(0, StoreOp{Kind: KindClaim, CallID: 1, Nonce: "n1", RetID: 7, OK: true})
	b.exec(1, 0, 100, okBody)
	b.answer(1, 0, 200, idemguard.Result{Status: idemguard.StatusSucceeded, Body: body(t, false), StatusCode: 200, LostClaim: true}, nil)
	require.Contains(t, kinds(Check(b.h)), VFalseLostClaim)
}

func TestCheckFindsACommitThatGaveUpEarly(t *testing.T) {
	b := newBuilder(time.Second)
	b.op(0, StoreOp{Kind: KindClaim, CallID: 1, Nonce: "n1", RetID: 7, OK: true})
	b.exec(1, 0, 100, okBody)
	// Not stored, not lost, returned 400ms after the operation with 500ms of lease left.
	b.answer(1, 0, 500, idemguard.Result{Status: idemguard.StatusSucceeded, Body: body(t, false), StatusCode: 200}, nil)
	require.Contains(t, kinds(Check(b.h)), VCommitGaveUp)
	b.h.Answers[0].End = b.at(900)
	require.NotContains(t, kinds(Check(b.h)), VCommitGaveUp)
}

func TestCheckFindsAnOrphanRow(t *testing.T) {
	b := clean(t)
	b.h.Final = []store.Record{{ID: 9, Tenant: "t", Scope: "s", KeyHash: "k", Status: store.RowStarted}}
	require.Contains(t, kinds(Check(b.h)), VOrphan)
}

func TestCheckFindsAHungCall(t *testing.T) {
	b := clean(t)
	b.h.Answers[1].End = time.Time{}
	require.Contains(t, kinds(Check(b.h)), VHung)
	b.h.Crashed[0] = b.at(550) // its replica died: the call never returns, and that is allowed
	require.NotContains(t, kinds(Check(b.h)), VHung)
}

// TestLinearizabilityFindsAStaleRead: a read that returns the row as it was before a commit
// that had already returned is not linearizable (the anomaly a multi-primary cluster without
// causal reads shows).
func TestLinearizabilityFindsAStaleRead(t *testing.T) {
	b := clean(t)
	b.op(800, StoreOp{Kind: KindGet, Rec: store.Record{ID: 7, Status: store.RowStarted, ClaimNonce: "n1", Attempts: 1}})
	require.Equal(t, porcupine.Illegal, CheckLinearizable(b.h, time.Second).Result)
	b.h.Ops[len(b.h.Ops)-1].Rec = store.Record{ID: 7, Status: store.RowSucceeded, ClaimNonce: "n1", Attempts: 1,
		Response: body(t, false), ResponseCode: 200}
	require.Equal(t, porcupine.Ok, CheckLinearizable(b.h, time.Second).Result)
}

// TestLinearizabilityAllowsAnUnknownOutcomeEitherWay: a write whose outcome is unknown may
// have taken effect, at any later point, or not at all.
func TestLinearizabilityAllowsAnUnknownOutcomeEitherWay(t *testing.T) {
	for _, landed := range []bool{true, false} {
		b := newBuilder(time.Second)
		o := b.op(0, StoreOp{Kind: KindClaim, CallID: 1, Nonce: "n1", Err: errors.New("connection lost")})
		o.Seq1 = 1 << 62
		if landed {
			b.op(10, StoreOp{Kind: KindGet, Rec: store.Record{ID: 7, Status: store.RowStarted, ClaimNonce: "n1", Attempts: 1}})
			b.h.Ops[0].RetID = 7
		} else {
			b.op(10, StoreOp{Kind: KindGet, NotFound: true})
		}
		require.NotEqual(t, porcupine.Illegal, CheckLinearizable(b.h, time.Second).Result, "landed=%v", landed)
	}
}

// TestLinearizabilityFindsTwoWinners: two claims of one absent row cannot both succeed.
func TestLinearizabilityFindsTwoWinners(t *testing.T) {
	b := newBuilder(time.Second)
	b.op(0, StoreOp{Kind: KindClaim, CallID: 1, Nonce: "n1", RetID: 7, OK: true})
	b.op(1, StoreOp{Kind: KindClaim, CallID: 2, Nonce: "n2", RetID: 8, OK: true})
	require.Equal(t, porcupine.Illegal, CheckLinearizable(b.h, time.Second).Result)
}

// TestCheckFindsAnAuditTrailThatDisagrees: a claim that applied without its event, an
// event of a claim that lost, and a durable event no write carried are each found; the
// trail that matches the writes passes.
func TestCheckFindsAnAuditTrailThatDisagrees(t *testing.T) {
	build := func(trail ...store.AuditEvent) []Violation {
		b := newBuilder(time.Second)
		b.op(0, StoreOp{Kind: KindClaim, CallID: 1, Nonce: "n1", RetID: 7, OK: true, AuditID: "won"})
		b.op(1, StoreOp{Kind: KindClaim, CallID: 2, Nonce: "n2", Dup: true, AuditID: "lost"})
		b.exec(1, 2, 100, okBody)
		b.h.Trail = append([]store.AuditEvent{}, trail...) // not nil: auditing was on
		var out []Violation
		for _, v := range Check(b.h) {
			if v.Kind == VAudit {
				out = append(out, v)
			}
		}
		return out
	}
	claimed := func(id string) store.AuditEvent {
		return store.AuditEvent{ID: id, Kind: store.AuditClaimed}
	}
	require.Empty(t, build(claimed("won")))
	require.Len(t, build(), 2, "the claim that applied, and the execution under it, have no event")
	require.Len(t, build(claimed("won"), claimed("lost")), 1, "the losing claim's event is in the trail")
	require.Len(t, build(claimed("won"), claimed("stray")), 1, "an event no write carried")
}

// Only a recorded cancel gives an attempt back: a failure stored as cancelled without a
// cancel of its claim is a violation, and its execution counts.
func TestCheckFindsAnAttemptGivenBackWithoutACancel(t *testing.T) {
	build := func(cancelled bool) *builder {
		b := newBuilder(time.Second)
		b.op(0, StoreOp{Kind: KindClaim, CallID: 1, Nonce: "n1", RetID: 7, OK: true})
		b.exec(1, 0, 300, nil)
		if cancelled {
			b.op(100, StoreOp{Kind: KindCancel, ID: 7, Nonce: "n1", OK: true})
		}
		failed := []byte(`{"ok":false,"stopReason":"canceled","needsHuman":false,"cached":false}`)
		b.op(300, StoreOp{Kind: KindComplete, CallID: 1, ID: 7, Nonce: "n1", Status: store.RowFailed, Response: failed, Code: 502, OK: true, Canceled: true})
		b.answer(1, 0, 300, idemguard.Result{Status: idemguard.StatusFailed, Body: failed, StatusCode: 502, CompletedAt: b.at(300)}, nil)
		return b
	}
	require.NotContains(t, kinds(Check(build(true).h)), VGiveBack)
	require.Contains(t, kinds(Check(build(false).h)), VGiveBack)
}

// A streamed success holds every event of the execution whose answer it got: a follower
// with a gap is a violation; a replay of a sequence too long to be stored is its one
// rendered event, and a document's replay is the document.
func TestCheckHoldsStreamsToTheirEvents(t *testing.T) {
	streamBody := func(cached bool) []byte {
		env, err := sanitize.FromValue(successBody(1, 0, 4))
		require.NoError(t, err)
		env.Cached = cached
		b, err := sanitize.Marshal(env)
		require.NoError(t, err)
		return b
	}
	build := func(max int, follower []string, origin idemguard.StreamOrigin) *builder {
		b := newBuilder(time.Second)
		b.h.Limits.MaxStreamBytes = max
		b.op(0, StoreOp{Kind: KindClaim, CallID: 1, Nonce: "n1", RetID: 7, OK: true})
		b.exec(1, 0, 500, successBody(1, 0, 4))
		b.h.Execs[0].Events = 4
		b.op(500, StoreOp{Kind: KindComplete, CallID: 1, ID: 7, Nonce: "n1", Status: store.RowSucceeded, Response: streamBody(false), Code: 200, OK: true})
		b.answer(1, 0, 500, idemguard.Result{Status: idemguard.StatusSucceeded, Body: streamBody(false), StatusCode: 200, CompletedAt: b.at(500)}, nil)
		b.answer(2, 100, 600, idemguard.Result{Status: idemguard.StatusSucceeded, Cached: true, Body: streamBody(true), StatusCode: 200}, nil)
		for i, events := range [][]string{streamEvents(1, 4, false), follower} {
			a := b.h.Answers[i]
			a.Stream, a.Events, a.Origin = true, events, []idemguard.StreamOrigin{idemguard.StreamLive, origin}[i]
		}
		return b
	}
	require.Empty(t, Check(build(1<<20, streamEvents(1, 4, false), idemguard.StreamAttached).h))
	require.Contains(t, kinds(Check(build(1<<20, streamEvents(1, 2, false), idemguard.StreamAttached).h)), VStream, "a gap")
	require.Empty(t, Check(build(40, []string{"1:env"}, idemguard.StreamReplayed).h), "not stored: rendered")
	require.Contains(t, kinds(Check(build(40, streamEvents(1, 2, false), idemguard.StreamAttached).h)), VStream,
		"a follower that lost events is not told it succeeded")
	require.Contains(t, kinds(Check(build(1<<20, []string{"1:env"}, idemguard.StreamReplayed).h)), VStream,
		"a stored sequence replays as itself")
}

// No event relayed to a streamed caller, whatever its answer, and no event of a row's stored
// sequence holds a blocked member in any JSON document of its data; other data (text, or a
// blocked name that is not a member) is not held to it.
func TestCheckFindsABlockedMemberInAnEvent(t *testing.T) {
	build := func(relayed []string, stored string) *builder {
		b := newBuilder(time.Second)
		b.op(0, StoreOp{Kind: KindClaim, CallID: 1, Nonce: "n1", RetID: 7, OK: true})
		b.exec(1, 0, 300, nil)
		b.h.Execs[0].Failed = true
		failed := []byte(`{"ok":false,"stopReason":"provider_error","needsHuman":false,"cached":false}`)
		b.op(300, StoreOp{Kind: KindComplete, CallID: 1, ID: 7, Nonce: "n1", Status: store.RowFailed, Response: failed, Code: 502, OK: true})
		b.answer(1, 0, 300, idemguard.Result{Status: idemguard.StatusFailed, Body: failed, StatusCode: 502, CompletedAt: b.at(300)}, nil)
		b.h.Answers[0].Stream, b.h.Answers[0].Events = true, relayed
		b.h.Final = []store.Record{{ID: 7, Tenant: "t", Scope: "s", KeyHash: "k", Status: store.RowFailed, Events: []byte(stored)}}
		return b
	}
	clean := []string{"{\"event\":\"1:1\"}\n{\"delta\":\"x\"}", "prompt: 1", `{"text":"prompt"}`}
	require.Empty(t, Check(build(clean, "data: {\"a\":1}\ndata: {\"delta\":\"x\"}\n\ndata: model\n\n").h))
	v := Check(build(append(clean, "{\"event\":\"1:2\"}\n{\"delta\":\"x\",\"usage\":{\"Model\":\"m\"}}"), "").h)
	require.Equal(t, []string{VBlocked}, kinds(v), "a blocked member in the second document, one level down")
	v = Check(build(clean, "data: {\"a\":1}\n\ndata: {\"b\":2}\ndata: {\"prompt\":\"c\"}\n\n").h)
	require.Equal(t, []string{VBlocked}, kinds(v), "a stored event's second data line")
	require.Contains(t, v[0].Detail, "row 7")
}

// A reset that returned ends the answer it reset: a call that began later and got that answer
// is a violation; one that began before it returned may still get it.
func TestCheckFindsAnAnswerReplayedAfterItsReset(t *testing.T) {
	build := func(replayAfter bool) *builder {
		b := newBuilder(time.Second)
		b.h.Keys[key] = KeySpec{Lease: time.Second, MaxAttempts: 3, Policy: idemguard.StaleTakeover, AllowReset: true}
		answered := successBody(1, 0, 0)
		env, err := sanitize.FromValue(answered)
		require.NoError(t, err)
		stored, err := sanitize.Marshal(env)
		require.NoError(t, err)
		env.Cached = true
		replayed, err := sanitize.Marshal(env)
		require.NoError(t, err)
		b.op(0, StoreOp{Kind: KindClaim, CallID: 1, Nonce: "n1", RetID: 7, OK: true})
		b.exec(1, 0, 500, answered)
		b.op(500, StoreOp{Kind: KindComplete, CallID: 1, ID: 7, Nonce: "n1", Status: store.RowSucceeded, Response: stored, Code: 200, OK: true})
		b.answer(1, 0, 500, idemguard.Result{Status: idemguard.StatusSucceeded, Body: stored, StatusCode: 200, CompletedAt: b.at(500)}, nil)
		b.seq += 2
		rc := &ResetCall{Seq0: b.seq - 1, CallID: 2, Key: key}
		b.h.Resets = append(b.h.Resets, rc)
		b.op(600, StoreOp{Kind: KindReset, CallID: 2, ID: 7, Nonce: "r1", OldNonce: "n1", OldAttempts: 1, OK: true})
		b.seq += 2
		rc.Seq1 = b.seq
		if replayAfter {
			b.answer(3, 700, 700, idemguard.Result{Status: idemguard.StatusSucceeded, Cached: true, Body: replayed, StatusCode: 200}, nil)
		}
		return b
	}
	require.NotContains(t, kinds(Check(build(false).h)), VResetReplay)
	require.Contains(t, kinds(Check(build(true).h)), VResetReplay)
}
