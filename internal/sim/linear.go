package sim

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/idemguard/idemguard/store"
)

// row is the model of one key's row: what every statement of the Store reads or guards on.
// Times are left out (the model cannot know the store's clock), so a guard that depends on
// time (stale, expired) may go either way, and a heartbeat changes nothing the model sees.
type row struct {
	exists      bool
	id          uint64
	status      store.RowStatus
	nonce       string
	attempts    int
	fingerprint string
	response    string // canonical JSON: MySQL normalises a JSON column's formatting
	code        int
}

// canonicalJSON is b decoded and encoded again (object keys sorted), so that a JSON column's
// normal form and the bytes written compare equal.
func canonicalJSON(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "!" + string(b)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return "!" + string(b)
	}
	return string(out)
}

// apply is the row after o took effect, and whether o's guard held on r (ignoring time).
func apply(r row, o *StoreOp) (row, bool) {
	own := r.exists && r.id == o.ID
	switch o.Kind {
	case KindClaim:
		if r.exists {
			return r, false
		}
		return row{exists: true, id: o.RetID, status: store.RowStarted, nonce: o.Nonce, attempts: 1, fingerprint: o.Fingerprint}, true
	case KindReclaim:
		if !own || r.nonce != o.OldNonce || r.attempts != o.OldAttempts {
			return r, false
		}
		return applyReclaim(r, o)
	case KindAbandon:
		if !own || r.nonce != o.OldNonce || r.attempts != o.OldAttempts || r.status != store.RowStarted {
			return r, false
		}
		r.status, r.response, r.code = store.RowFailed, canonicalJSON(o.Response), o.Code
		return r, true
	case KindReset: // the row stays as it was, expired (time is not modelled) under a new nonce
		if !own || r.nonce != o.OldNonce || r.attempts != o.OldAttempts || r.status == store.RowStarted {
			return r, false
		}
		r.nonce = o.Nonce
		return r, true
	case KindHeartbeat, KindCancel:
		return r, own && r.status == store.RowStarted && r.nonce == o.Nonce
	case KindComplete:
		if !own || r.status != store.RowStarted || r.nonce != o.Nonce {
			return r, false
		}
		r.status, r.response, r.code = o.Status, canonicalJSON(o.Response), o.Code
		if o.Canceled && r.attempts > 0 {
			r.attempts-- // a cancelled execution gives its attempt back
		}
		return r, true
	case KindRelease:
		if !own || r.status != store.RowStarted || r.nonce != o.Nonce {
			return r, false
		}
		if o.Prev == nil {
			return row{}, true
		}
		p := o.Prev
		r.status, r.nonce, r.attempts = p.Status, p.ClaimNonce, p.Attempts
		r.response, r.code = canonicalJSON(p.Response), p.ResponseCode
		return r, true
	}
	return r, false
}

// applyReclaim is the row after the reclaim o (guarded by r's nonce and attempts, which
// held), and whether its kind's own guard held on r (ignoring time).
func applyReclaim(r row, o *StoreOp) (row, bool) {
	switch o.Reclaim {
	case store.ReclaimExpired:
		return row{exists: true, id: r.id, status: store.RowStarted, nonce: o.Nonce, attempts: 1, fingerprint: o.Fingerprint}, true
	case store.ReclaimStale:
		if r.status != store.RowStarted {
			return r, false
		}
		r.attempts++
	case store.ReclaimFailed:
		if r.status != store.RowFailed || r.attempts >= o.MaxAttempts {
			return r, false
		}
		r.status, r.response, r.code = store.RowStarted, "", 0
		r.attempts++
	case store.ReclaimForced:
		if r.status == store.RowStarted {
			return r, false
		}
		r.status, r.response, r.code = store.RowStarted, "", 0
		r.attempts++
	default:
		return r, false
	}
	r.nonce = o.Nonce
	return r, true
}

// timeGuarded reports whether o's guard also depends on the store's clock (stale, expired),
// so that it may fail although the rest of it held.
func timeGuarded(o *StoreOp) bool {
	return o.Kind == KindAbandon || o.Kind == KindReclaim || o.Kind == KindReset
}

// step is the model's transition: the states o may leave r in, given what o returned.
func step(r row, o *StoreOp) []any {
	next, held := apply(r, o)
	if o.Err != nil { // unknown outcome: applied or not
		if held {
			return []any{r, next}
		}
		return []any{r}
	}
	switch o.Kind {
	case KindGet:
		if o.NotFound {
			if !r.exists {
				return []any{r}
			}
			return nil
		}
		g := o.Rec
		if r.exists && r.id == g.ID && r.status == g.Status && r.nonce == g.ClaimNonce && r.attempts == g.Attempts &&
			r.fingerprint == g.Fingerprint && r.response == canonicalJSON(g.Response) && r.code == g.ResponseCode {
			return []any{r}
		}
		return nil
	case KindClaim:
		if o.Dup {
			if r.exists {
				return []any{r}
			}
			return nil
		}
		if held {
			return []any{next}
		}
		return nil
	}
	switch {
	case o.OK && held:
		return []any{next}
	case o.OK:
		return nil
	case !held || timeGuarded(o):
		return []any{r}
	}
	return nil
}

// Model is the porcupine model of the idempotency_keys table, partitioned by key: each key's
// statements must be explainable as one sequence of atomic steps of its row, each taking
// effect between its call and its return (a write whose outcome is unknown may take effect
// at any later point, or never).
var Model = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(*StoreOp).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init:  func() []any { return []any{row{}} },
	Step:  func(state, input, _ any) []any { return step(state.(row), input.(*StoreOp)) },
	Equal: func(a, b any) bool { return a.(row) == b.(row) },
	DescribeOperation: func(input, _ any) string {
		o := input.(*StoreOp)
		return fmt.Sprintf("%s id=%d nonce=%.8s ok=%v err=%v", o.Kind, o.ID, o.Nonce, o.OK, o.Err)
	},
	DescribeState: func(state any) string {
		r := state.(row)
		if !r.exists {
			return "absent"
		}
		return fmt.Sprintf("%s %.8s attempt %d", r.status, r.nonce, r.attempts)
	},
}

// LinearResult is the outcome of CheckLinearizable.
type LinearResult struct {
	// Result is porcupine's verdict: Ok, Illegal, or Unknown (the search timed out).
	Result porcupine.CheckResult
	// Ops is how many statements were checked.
	Ops int
}

// CheckLinearizable checks h's store statements for linearizability against Model, within
// timeout. Statements whose key is unknown (a heartbeat on a row no read or claim has shown)
// and failed reads (no effect) are left out.
func CheckLinearizable(h *History, timeout time.Duration) LinearResult {
	ops, _, _ := h.snapshot()
	var in []porcupine.Operation
	for i := range ops {
		o := &ops[i]
		if o.Key == "" || o.Kind == KindGet && o.Err != nil {
			continue
		}
		in = append(in, porcupine.Operation{ClientId: max(o.CallID, 0), Input: o, Output: o, Call: o.Seq0, Return: o.Seq1})
	}
	return LinearResult{Result: porcupine.CheckOperationsTimeout(Model.ToModel(), in, timeout), Ops: len(in)}
}
