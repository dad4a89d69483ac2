package idemguard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"time"

	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// commit stores the answer (stored: res.Body with its headers and dropped
// names, as the row keeps them) as the row's outcome (status) while the claim holds,
// and fills in what the store says of it: the completion time, or that the
// claim was lost. The caller gets res either way: it paid for it.
func (g *Guard) commit(ctx context.Context, p prepared, o owned, hb *heartbeat, res Result, stored []byte, status store.RowStatus, document bool) Result {
	committing := g.now()
	committed, completedAt, err := g.complete(ctx, p, hb, store.CompleteParams{ID: o.id, Nonce: o.nonce, Status: status,
		Response: stored, ResponseCode: res.StatusCode, Events: p.delivery.events(status), TTL: p.settings.TTL,
		Canceled: status == store.RowFailed && res.StopReason == sanitize.Canceled, Progress: hb.progress.Load().last()})
	switch {
	case err != nil:
		// The row stays started and will be taken over once stale.
		g.log.Error("guard: storing the result failed; it will not be replayed", g.attrs(p, slog.Any("err", err))...)
	case !committed:
		res.LostClaim = true
		g.emit(Event{Kind: EventLostClaim, Scope: p.scope})
		g.log.Warn("guard: claim taken over before commit; result not stored", g.attrs(p, slog.Int("attempt", o.attempt))...)
	default:
		// The store's completed_at, so a replay from memory says what one
		// read from the store says. The entry's lifetime is counted from
		// before the commit was sent: the row expires TTL after it landed.
		res.CompletedAt = completedAt
		if status == store.RowSucceeded && g.cache != nil { // replayOf copies the body: not for a disabled cache
			g.cache.put(p.tenant, p.scope, p.keyHash, p.fingerprint, replayOf(res, document),
				committing.Add(min(g.cacheAge(p), p.settings.TTL)))
		}
	}
	return res
}

// complete writes the outcome while the lease holds, with the heartbeat
// still renewing it. Every attempt that does not report success, whether it
// changed no row or its outcome is unknown (a lost reply, a timeout, error
// 1213), is settled by re-reading the row: our nonce with our outcome means
// the commit landed; our nonce still started means try again; anything else
// means the claim was lost. completedAt is the completion time the store
// wrote (its clock).
func (g *Guard) complete(ctx context.Context, p prepared, hb *heartbeat, cp store.CompleteParams) (committed bool, completedAt time.Time, err error) {
	// The first write takes only ctx's values (writeCtx): ctx is detached
	// from its caller (an allocation) once a re-read or a pause follows.
	pause := 50 * time.Millisecond
	// Heartbeats that land keep renewing the lease, so a statement that
	// fails for good (while the row is readable) is also bounded by one
	// lease length.
	giveUp := time.Now().Add(p.settings.StaleAfter)
	var lastErr error
	for try := 0; ; try++ {
		sctx, cancel := g.writeCtx(ctx)
		ok, at, err := g.store.Complete(sctx, cp)
		cancel()
		if err == nil && ok {
			return true, at, nil
		}
		if try == 0 {
			ctx = context.WithoutCancel(ctx)
		}
		if err != nil {
			lastErr = err
			g.emit(Event{Kind: EventStoreError, Scope: p.scope, StoreOp: "commit"})
			g.log.Warn("guard: commit failed; re-reading the row", g.attrs(p, slog.Any("err", err))...)
		}
		sctx, cancel = g.storeCtx(ctx)
		rec, rerr := g.store.Get(sctx, p.tenant, p.scope, p.keyHash)
		cancel()
		switch {
		case errors.Is(rerr, ErrNotFound):
			return false, time.Time{}, nil
		case rerr != nil:
			lastErr = rerr
		case rec.ID != cp.ID || rec.ClaimNonce != cp.Nonce:
			return false, time.Time{}, nil
		case rec.Status != store.RowStarted:
			if rec.Status == cp.Status && rec.ResponseCode == cp.ResponseCode && sameJSON(rec.Response, cp.Response) {
				return true, rec.CompletedAt, nil
			}
			return false, time.Time{}, nil // abandoned by another caller
		}
		// A closing Guard does not wait out the lease: its caller gets
		// the answer before the process exits.
		if (hb.left() <= 0 || time.Now().After(giveUp) || g.lifetime.Err() != nil) && try > 0 {
			if lastErr == nil {
				lastErr = errors.New("lease ran out")
			}
			return false, time.Time{}, g.storeErr(ctx, p, "commit", lastErr)
		}
		sleepCtx(ctx, min(jitter(pause), max(hb.left(), time.Millisecond)))
		pause = min(2*pause, time.Second)
	}
}

// sameJSON reports whether two JSON documents are equal as values (MySQL
// normalises a JSON column's formatting and key order).
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// replayOf turns a fresh result into what a replay of it answers: a
// document as it was, an envelope with cached true. The envelope's body is
// the first caller's bytes with "cached":false made true (replayBody), not
// encoded again: encoding was ~7% of a fresh key's guard CPU, and the
// bytes are fixed, whatever the caller does with the Envelope's data later.
func replayOf(r Result, document bool) Result {
	r.Cached, r.Err, r.LostClaim = true, nil, false
	if document {
		return r
	}
	r.Envelope.Cached = true
	if body := replayBody(r.Body); body != nil {
		r.Body = body
		return r
	}
	body, err := sanitize.Marshal(r.Envelope)
	if err != nil {
		return Result{}
	}
	r.Body = body
	return r
}

// cachedFalse is how a fresh envelope's body says it is not a replay.
var cachedFalse = []byte(`,"cached":false`)

// replayBody is a fresh envelope's body as a replay of it answers it: a
// copy with its "cached":false made true, nil when fresh has none. The
// field precedes data, the only members a caller's values fill freely, and
// no JSON string holds an unescaped quote, so the first ,"cached":false is
// the envelope's own (sanitize.Marshal writes every field in one order).
func replayBody(fresh []byte) []byte {
	i := bytes.Index(fresh, cachedFalse)
	if i < 0 {
		return nil
	}
	out := make([]byte, 0, len(fresh)-1)
	out = append(out, fresh[:i]...)
	out = append(out, `,"cached":true`...)
	return append(out, fresh[i+len(cachedFalse):]...)
}
