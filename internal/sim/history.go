package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/store"
)

// Kind names a Store method in a history.
type Kind string

// The Store methods a history records.
const (
	KindClaim     Kind = "claim"
	KindGet       Kind = "get"
	KindReclaim   Kind = "reclaim"
	KindAbandon   Kind = "abandon"
	KindHeartbeat Kind = "heartbeat"
	KindComplete  Kind = "complete"
	KindRelease   Kind = "release"
	KindCancel    Kind = "cancel" // RequestCancel
	KindReset     Kind = "reset"
)

// StoreOp is one statement that reached the store, as the Recorder saw it.
type StoreOp struct {
	// Seq0 and Seq1 order the call and the return among every event of the history
	// (porcupine's Call and Return). Seq1 is math.MaxInt64 for a write whose outcome the
	// store could not report: it may take effect at any later point.
	Seq0, Seq1 int64
	// Call and Return are the local clock at the call and at the return.
	Call, Return time.Time
	// Sent is when the engine sent the call (before any injected delay); equal to Call
	// without a fault layer.
	Sent time.Time
	Kind Kind
	// Key names the row: tenant/scope/key_hash ("" if the row id was never seen).
	Key string
	// CallID is the Do call that made the statement (-1: a background task of the engine
	// whose nonce names no call, such as a read of a late release).
	CallID int
	// Replica is the replica whose Faults layer passed the call on (-1: none).
	Replica int

	// Inputs.
	ID          uint64
	Nonce       string // Claim, Heartbeat, Complete, Release; Reclaim: the new nonce
	OldNonce    string // Reclaim, Abandon
	OldAttempts int
	Reclaim     store.ReclaimKind
	MaxAttempts int
	Fingerprint string
	Status      store.RowStatus // Complete
	Canceled    bool            // Complete: the attempt is given back
	Response    []byte          // Complete, Abandon
	Code        int
	Prev        *store.Record // Release
	// AuditID is the id of the durable audit event the write carried ("" for none).
	AuditID string

	// Outputs.
	OK       bool // Reclaim, Abandon, Heartbeat, Complete, Release changed the row; Claim inserted it
	RetID    uint64
	Dup      bool // Claim: ErrDuplicate
	NotFound bool // Get: ErrNotFound
	Rec      store.Record
	Err      error // any other error: the outcome is unknown

	// What the engine was told (set by Faults; without them, what the store answered).
	SeenOK  bool
	SeenErr error
	// SeenAt is when the engine got the answer (for an answer the fault layer held back,
	// later than Return).
	SeenAt time.Time
	Seen   bool // the store answered

	slot *slot
}

// Applied reports whether the write certainly changed the row.
func (o *StoreOp) Applied() bool { return o.Err == nil && o.Kind != KindGet && o.OK }

// MayHaveApplied reports whether the write may have changed the row: it did, or its outcome
// is unknown (a real store's timeout after the statement was sent). Checks that look for a
// write that must exist use it; checks that take a write as evidence of a violation use
// Applied.
func (o *StoreOp) MayHaveApplied() bool { return o.Kind != KindGet && (o.Err != nil || o.OK) }

// Execution is one run of an operation, from its first instruction to its return.
type Execution struct {
	// Seq0 and Seq1 order the start and the end among the history's events.
	Seq0, Seq1 int64
	Key        string
	CallID     int
	Replica    int
	Start      time.Time
	End        time.Time // zero while running
	// Failed: the operation returned an error; Cut: it stopped because its context ended.
	Failed, Cut bool
	// Body is the envelope the operation answered (nil when it failed).
	Body map[string]any
	// Events is how many events the operation emits when it succeeds, if it streams;
	// Documents: each of several JSON documents (Client.Documents).
	Events    int
	Documents bool
}

// Answer is what one Do call returned.
type Answer struct {
	// Seq0 and Seq1 order the call and the return among the history's events.
	Seq0, Seq1 int64
	CallID     int
	Key        string
	Replica    int
	Start      time.Time
	End        time.Time
	Result     idemguard.Result
	Err        error
	// Lost: the call's replica crashed; it never returned to its caller.
	Lost bool
	// Probe: a call made after the faults stopped, to prove that no row is left started
	// without a living owner.
	Probe bool
	// Stream: the call was a DoStream; Events are the data of the events its writer got,
	// in order.
	Stream bool
	Events []string
	// Origin is what the stream's writer was told it got first (StreamStart.Origin).
	Origin idemguard.StreamOrigin
	// Gone: the caller hung up (its context ended) before the call returned; a stream
	// stops writing to a caller that is gone.
	Gone bool
}

// KeySpec is what a history's key was run with.
type KeySpec struct {
	Lease       time.Duration
	MaxAttempts int
	Policy      idemguard.StalePolicy
	// AllowReset: the key's scope allows resets and forced runs (reset.go).
	AllowReset bool
	// Keep: every call of the key keeps its answer as a document (Call.Keep, KeepAllBut).
	Keep bool
}

// History is everything one run recorded. Its methods are safe for concurrent use.
type History struct {
	mu      sync.Mutex
	seq     int64
	Ops     []*StoreOp
	Execs   []*Execution
	Answers []*Answer
	Keys    map[string]KeySpec
	ids     map[uint64]string // row id → key
	nonces  map[string]int    // claim nonce → call
	// Crashed maps a replica to the moment it crashed.
	Crashed map[int]time.Time
	// ReachableFrom is the first moment of [from, to] from which replica could reach the
	// store until to: the end of the last outage or pause that overlaps it, or from (nil:
	// always from).
	ReachableFrom func(replica int, from, to time.Time) time.Time
	// releases holds when each release of a claim nonce was sent, faults or not; claims
	// when the first claim write carrying a nonce was.
	releases map[string][]time.Time
	claims   map[string]time.Time
	// Final is the store's rows when the run ended (nil: not taken).
	Final []store.Record
	// Trail is the store's audit trail when the run ended (nil: auditing was off).
	Trail []store.AuditEvent
	// StoreTime converts a local time to the store's clock (nil: the same clock).
	StoreTime func(time.Time) time.Time
	// Limits holds the engine constants the invariants refer to.
	Limits Limits
	// Resets are the resetters' calls (reset.go).
	Resets []*ResetCall
}

// Limits are engine settings the checker needs.
type Limits struct {
	// StoreTimeout bounds one store call (Config.StoreTimeout).
	StoreTimeout time.Duration
	// StrictLease holds every execution to end half its owner's margin before its row
	// could be judged stale (the engine promises a whole margin; half is left for the store
	// clock's steps). Without it the checker allows the whole lease: a real store's
	// statements land at an unknown point between call and return.
	StrictLease bool
	// MaxStreamBytes is the guards' Config.MaxStreamBytes: a longer sequence of events is
	// stored without them.
	MaxStreamBytes int
}

// NewHistory returns an empty History.
func NewHistory() *History {
	return &History{Keys: map[string]KeySpec{}, ids: map[uint64]string{}, nonces: map[string]int{},
		Crashed:  map[int]time.Time{},
		releases: map[string][]time.Time{}, claims: map[string]time.Time{}}
}

func (h *History) next() int64 {
	h.seq++
	return h.seq
}

// KeyOf names a row as a history does.
func KeyOf(tenant, scope, keyHash string) string { return tenant + "/" + scope + "/" + keyHash }

// Begin registers a Do call: its key, replica and start.
func (h *History) Begin(callID int, key string, replica int, probe bool) *Answer {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := &Answer{Seq0: h.next(), CallID: callID, Key: key, Replica: replica, Start: time.Now(), Probe: probe}
	h.Answers = append(h.Answers, a)
	return a
}

// Finish records what a Do call returned.
func (h *History) Finish(a *Answer, res idemguard.Result, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a.Seq1, a.End, a.Result, a.Err = h.next(), time.Now(), res, err
}

// MarkStream records that a's call is a DoStream, before it runs.
func (h *History) MarkStream(a *Answer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a.Stream = true
}

// FinishStream records that a streamed call returned, with the events its writer got.
func (h *History) FinishStream(a *Answer, res idemguard.Result, err error, origin idemguard.StreamOrigin, events []string, gone bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a.Seq1, a.End, a.Result, a.Err = h.next(), time.Now(), res, err
	a.Origin, a.Events, a.Gone = origin, events, gone
}

// StreamExec records that e streams n events when it succeeds, each of several JSON
// documents if documents.
func (h *History) StreamExec(e *Execution, n int, documents bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e.Events, e.Documents = n, documents
}

// StartExec records that call callID started its operation on key.
func (h *History) StartExec(key string, callID, replica int) *Execution {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := &Execution{Seq0: h.next(), Key: key, CallID: callID, Replica: replica, Start: time.Now()}
	h.Execs = append(h.Execs, e)
	return e
}

// EndExec records that e ended (failed, cut off by its context, or with body).
func (h *History) EndExec(e *Execution, at time.Time, failed, cut bool, body map[string]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if e.End.IsZero() {
		e.Seq1, e.End, e.Failed, e.Cut, e.Body = h.next(), at, failed, cut, body
	}
}

// releaseSent records that a release of nonce was sent at.
func (h *History) releaseSent(nonce string, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.releases[nonce] = append(h.releases[nonce], at)
}

// claimSent records that a claim write carrying nonce was sent at.
func (h *History) claimSent(nonce string, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.claims[nonce]; !ok || at.Before(t) {
		h.claims[nonce] = at
	}
}

// firstClaim is when the first claim write carrying nonce was sent (zero: none recorded).
func (h *History) firstClaim(nonce string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.claims[nonce]
}

// releaseTried reports whether a release of nonce was sent before t.
func (h *History) releaseTried(nonce string, t time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, at := range h.releases[nonce] {
		if at.Before(t) {
			return true
		}
	}
	return false
}

// Crash records that replica crashed at.
func (h *History) Crash(replica int, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.Crashed[replica]; !ok {
		h.Crashed[replica] = at
	}
}

// SetKey records the settings key runs with.
func (h *History) SetKey(key string, s KeySpec) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Keys[key] = s
}

// snapshot returns copies of the history's slices, for checking.
func (h *History) snapshot() ([]StoreOp, []Execution, []Answer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ops := make([]StoreOp, len(h.Ops))
	for i, o := range h.Ops {
		ops[i] = *o
	}
	execs := make([]Execution, len(h.Execs))
	for i, e := range h.Execs {
		execs[i] = *e
	}
	answers := make([]Answer, len(h.Answers))
	for i, a := range h.Answers {
		answers[i] = *a
	}
	return ops, execs, answers
}

// Counts reports how many store statements, executions and answers h holds.
func (h *History) Counts() (ops, execs, answers int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.Ops), len(h.Execs), len(h.Answers)
}

type callKey struct{}

// WithCall tags ctx with a Do call's id; the Recorder attributes the statements made under it.
func WithCall(ctx context.Context, callID int) context.Context {
	return context.WithValue(ctx, callKey{}, callID)
}

func callOf(ctx context.Context) int {
	if id, ok := ctx.Value(callKey{}).(int); ok {
		return id
	}
	return -1
}

// slot lets a Faults layer annotate the StoreOp the Recorder below it writes.
type slot struct {
	sent    time.Time
	replica int
	op      *StoreOp
	// told: the fault layer has said what the engine got (ok, err), at.
	told bool
	ok   bool
	err  error
	at   time.Time
}

// tell records what the engine was told about the statement of s.
func (h *History) tell(s *slot, ok bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.told, s.ok, s.err, s.at = true, ok, err, time.Now()
	if s.op != nil && s.op.Seen {
		s.op.SeenOK, s.op.SeenErr, s.op.SeenAt = ok, err, s.at
	}
}

type slotKey struct{}

func withSlot(ctx context.Context, s *slot) context.Context {
	return context.WithValue(ctx, slotKey{}, s)
}

// Recorder is a Store that records every call to the store it wraps into a History.
type Recorder struct {
	st store.Store
	h  *History
}

var _ store.Store = (*Recorder)(nil)

// NewRecorder wraps store, recording into h.
func NewRecorder(st store.Store, h *History) *Recorder { return &Recorder{st: st, h: h} }

// begin opens a StoreOp.
func (r *Recorder) begin(ctx context.Context, op *StoreOp) {
	h := r.h
	h.mu.Lock()
	defer h.mu.Unlock()
	op.Seq0, op.Call, op.CallID = h.next(), time.Now(), callOf(ctx)
	op.Sent, op.Replica = op.Call, -1
	if s, ok := ctx.Value(slotKey{}).(*slot); ok {
		op.Sent, op.Replica, s.op, op.slot = s.sent, s.replica, op, s
	}
	if op.Key == "" {
		op.Key = h.ids[op.ID]
	}
	if c, ok := h.nonces[op.Nonce]; ok && op.CallID < 0 && op.Kind != KindCancel { // a cancel names another call's claim
		op.CallID = c
	}
	switch op.Kind {
	case KindClaim, KindReclaim:
		if op.CallID >= 0 {
			h.nonces[op.Nonce] = op.CallID
		}
		if t, ok := h.claims[op.Nonce]; !ok || op.Sent.Before(t) {
			h.claims[op.Nonce] = op.Sent
		}
	}
	h.Ops = append(h.Ops, op)
}

// end closes op with the store's answer; set fills in op's results, under the history's lock
// (a check may read the history while a Guard's background release still writes to it).
func (r *Recorder) end(op *StoreOp, err error, set func()) {
	h := r.h
	h.mu.Lock()
	defer h.mu.Unlock()
	set()
	op.Return = time.Now()
	switch {
	case err == nil:
	case errors.Is(err, store.ErrDuplicate):
		op.Dup = true
	case errors.Is(err, idemguard.ErrNotFound):
		op.NotFound = true
	default:
		op.Err = err
	}
	if op.Err != nil && op.Kind != KindGet {
		op.Seq1 = math.MaxInt64
	} else {
		op.Seq1 = h.next()
	}
	if op.RetID != 0 {
		h.ids[op.RetID] = op.Key
	}
	if op.Kind == KindGet && op.Err == nil && !op.NotFound {
		h.ids[op.Rec.ID] = op.Key
	}
	op.SeenOK, op.SeenErr, op.Seen, op.SeenAt = op.OK, err, true, op.Return
	if s := op.slot; s != nil && s.told {
		op.SeenOK, op.SeenErr, op.SeenAt = s.ok, s.err, s.at
	}
}

// Claim implements store.Store.
func (r *Recorder) Claim(ctx context.Context, p store.ClaimParams) (uint64, error) {
	op := &StoreOp{Kind: KindClaim, Key: KeyOf(p.Tenant, p.Scope, p.KeyHash), Nonce: p.Nonce, Fingerprint: p.Fingerprint,
		AuditID: auditID(p.Audit)}
	r.begin(ctx, op)
	id, err := r.st.Claim(ctx, p)
	r.end(op, err, func() { op.RetID, op.OK = id, err == nil })
	return id, err
}

// Get implements store.Store.
func (r *Recorder) Get(ctx context.Context, tenant, scope, keyHash string) (store.Record, error) {
	op := &StoreOp{Kind: KindGet, Key: KeyOf(tenant, scope, keyHash)}
	r.begin(ctx, op)
	rec, err := r.st.Get(ctx, tenant, scope, keyHash)
	r.end(op, err, func() { op.Rec = rec })
	return rec, err
}

// Reclaim implements store.Store.
func (r *Recorder) Reclaim(ctx context.Context, p store.ReclaimParams) (bool, error) {
	op := &StoreOp{Kind: KindReclaim, ID: p.ID, Nonce: p.NewNonce, OldNonce: p.OldNonce, OldAttempts: p.OldAttempts,
		Reclaim: p.Kind, MaxAttempts: p.MaxAttempts, Fingerprint: p.Fingerprint, AuditID: auditID(p.Audit)}
	r.begin(ctx, op)
	ok, err := r.st.Reclaim(ctx, p)
	r.end(op, err, func() { op.OK = ok })
	return ok, err
}

// Abandon implements store.Store.
func (r *Recorder) Abandon(ctx context.Context, p store.AbandonParams) (bool, error) {
	op := &StoreOp{Kind: KindAbandon, ID: p.ID, OldNonce: p.OldNonce, OldAttempts: p.OldAttempts,
		Response: p.Response, Code: p.ResponseCode, AuditID: auditID(p.Audit)}
	r.begin(ctx, op)
	ok, err := r.st.Abandon(ctx, p)
	r.end(op, err, func() { op.OK = ok })
	return ok, err
}

// Heartbeat implements store.Store.
func (r *Recorder) Heartbeat(ctx context.Context, id uint64, nonce string) (bool, error) {
	op := &StoreOp{Kind: KindHeartbeat, ID: id, Nonce: nonce}
	r.begin(ctx, op)
	ok, err := r.st.Heartbeat(ctx, id, nonce)
	r.end(op, err, func() { op.OK = ok })
	return ok, err
}

// Complete implements store.Store.
func (r *Recorder) Complete(ctx context.Context, p store.CompleteParams) (bool, time.Time, error) {
	op := &StoreOp{Kind: KindComplete, ID: p.ID, Nonce: p.Nonce, Status: p.Status, Response: p.Response, Code: p.ResponseCode,
		Canceled: p.Canceled}
	r.begin(ctx, op)
	ok, at, err := r.st.Complete(ctx, p)
	r.end(op, err, func() { op.OK = ok })
	return ok, at, err
}

// Release implements store.Store.
func (r *Recorder) Release(ctx context.Context, p store.ReleaseParams) (bool, error) {
	op := &StoreOp{Kind: KindRelease, ID: p.ID, Nonce: p.Nonce, Prev: p.Prev, AuditID: auditID(p.Audit)}
	if _, faulted := ctx.Value(slotKey{}).(*slot); !faulted {
		r.h.releaseSent(p.Nonce, time.Now())
	}
	r.begin(ctx, op)
	ok, err := r.st.Release(ctx, p)
	r.end(op, err, func() { op.OK = ok })
	return ok, err
}

// Ping implements store.Store.
func (r *Recorder) Ping(ctx context.Context) error { return r.st.Ping(ctx) }

// Dump describes key's history (every key's if key is ""), one event a line, in order: for
// reading a failing seed.
func (h *History) Dump(key string) string {
	ops, execs, answers := h.snapshot()
	type line struct {
		seq  int64
		text string
	}
	var lines []line
	ms := func(t time.Time) string { return t.Format("04:05.000000") }
	for i, o := range ops {
		if key != "" && o.Key != key {
			continue
		}
		if o.Kind == KindGet && o.CallID < 0 && i > 0 && ops[i-1].Kind == KindGet && ops[i-1].CallID < 0 &&
			ops[i-1].Rec.ClaimNonce == o.Rec.ClaimNonce && ops[i-1].Rec.Status == o.Rec.Status {
			continue // a background task polling an unchanged row
		}
		res := fmt.Sprintf("ok=%v", o.OK)
		switch {
		case o.Err != nil:
			res = "err=" + o.Err.Error()
		case o.Dup:
			res = "duplicate"
		case o.NotFound:
			res = "absent"
		case o.Kind == KindGet:
			res = fmt.Sprintf("%s nonce=%.6s attempts=%d hb=%s", o.Rec.Status, o.Rec.ClaimNonce, o.Rec.Attempts, ms(o.Rec.HeartbeatAt))
		}
		seen := ""
		if o.SeenErr != nil || o.SeenOK != o.OK {
			seen = fmt.Sprintf(" (engine told ok=%v err=%v)", o.SeenOK, o.SeenErr)
		}
		lines = append(lines, line{o.Seq0, fmt.Sprintf("%s r%d call %d %s %s id=%d nonce=%.6s old=%.6s %s -> %s%s [sent %s, returned %s]",
			ms(o.Call), o.Replica, o.CallID, o.Kind, o.Reclaim, o.ID, o.Nonce, o.OldNonce, o.Status, res, seen, ms(o.Sent), ms(o.Return))})
	}
	for _, e := range execs {
		if key == "" || e.Key == key {
			lines = append(lines, line{e.Seq0, fmt.Sprintf("%s call %d replica %d STARTS the operation", ms(e.Start), e.CallID, e.Replica)})
			lines = append(lines, line{e.Seq1, fmt.Sprintf("%s call %d ENDS the operation (failed=%v cut=%v)", ms(e.End), e.CallID, e.Failed, e.Cut)})
		}
	}
	for _, a := range answers {
		if key == "" || a.Key == key {
			lines = append(lines, line{a.Seq0, fmt.Sprintf("%s call %d replica %d calls Do (probe=%v)", ms(a.Start), a.CallID, a.Replica, a.Probe)})
			lines = append(lines, line{a.Seq1, fmt.Sprintf("%s call %d returns %s cached=%v lost=%v completed=%v err=%v", ms(a.End), a.CallID,
				a.Result.Status, a.Result.Cached, a.Result.LostClaim, !a.Result.CompletedAt.IsZero(), a.Err)})
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int { return cmp.Compare(a.seq, b.seq) })
	var b strings.Builder
	for r, at := range h.Crashed {
		fmt.Fprintf(&b, "replica %d crashed at %s\n", r, ms(at))
	}
	for _, l := range lines {
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	return b.String()
}

// Renew implements store.Store. The owner's heartbeat is recorded as one: it moves the
// row's heartbeat forward for its nonce (and keeps the row alive, which no checked rule reads).
func (r *Recorder) Renew(ctx context.Context, p store.RenewParams) (store.RenewResult, error) {
	op := &StoreOp{Kind: KindHeartbeat, ID: p.ID, Nonce: p.Nonce}
	r.begin(ctx, op)
	res, err := r.st.Renew(ctx, p)
	r.end(op, err, func() { op.OK = res.Renewed })
	return res, err
}

// GetMany implements store.Store; the simulation configures one secret, so the guard never
// calls it.
func (r *Recorder) GetMany(ctx context.Context, tenant, scope string, keyHashes []string) ([]store.Record, error) {
	return r.st.GetMany(ctx, tenant, scope, keyHashes)
}

// RequestCancel implements store.Store: a guarded write on the owner's nonce that
// changes nothing the model sees (cancel_requested_at).
func (r *Recorder) RequestCancel(ctx context.Context, p store.CancelParams) (bool, error) {
	op := &StoreOp{Kind: KindCancel, ID: p.ID, Nonce: p.Nonce, AuditID: auditID(p.Audit)}
	r.begin(ctx, op)
	ok, err := r.st.RequestCancel(ctx, p)
	r.end(op, err, func() { op.OK = ok })
	return ok, err
}

// Reset implements store.Store: a guarded write on a finished row's nonce that gives the
// row a new nonce and ends its life (expired a microsecond ago).
func (r *Recorder) Reset(ctx context.Context, p store.ResetParams) (bool, error) {
	op := &StoreOp{Kind: KindReset, ID: p.ID, Nonce: p.NewNonce, OldNonce: p.OldNonce, OldAttempts: p.OldAttempts,
		AuditID: auditID(p.Audit)}
	r.begin(ctx, op)
	ok, err := r.st.Reset(ctx, p)
	r.end(op, err, func() { op.OK = ok })
	return ok, err
}

// AppendAudit implements store.Store; the audit trail is not part of
// the history the checker reads.
func (r *Recorder) AppendAudit(ctx context.Context, events []store.AuditEvent) error {
	return r.st.AppendAudit(ctx, events)
}

// History implements store.Store.
func (r *Recorder) History(ctx context.Context, tenant, scope string, keyHashes []string, limit int) ([]store.AuditEvent, error) {
	return r.st.History(ctx, tenant, scope, keyHashes, limit)
}

// auditID is the id of a write's durable audit event, or "".
func auditID(e *store.AuditEvent) string {
	if e == nil {
		return ""
	}
	return e.ID
}
