package idemguard

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"runtime/debug"
	"time"

	"github.com/idemguard/idemguard/internal/testhooks"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// owned is a claim this call holds.
type owned struct {
	id        uint64
	nonce     string
	attempt   int
	firstSeen time.Time
	// leaseFrom is when the write that took the claim was sent (local
	// monotonic clock): the lease's first beat.
	leaseFrom time.Time
	// prev is the row before a Reclaim took it (nil after a Claim or an
	// expired re-claim), for Release.
	prev *store.Record
	// audit is the durable event of the claim (nil: auditing off).
	audit *store.AuditEvent
	// slot gives back the execution's place under Call.Admit (nil: none).
	slot func()
	// replaced is, for a forced run (Call.ForceNew), the attempt whose
	// answer it replaces; 0 otherwise.
	replaced int
}

// freeSlot gives back the execution's place under Call.Admit, if any.
func (o owned) freeSlot() {
	if o.slot != nil {
		o.slot()
	}
}

// own starts the operation on a claim this call took, unless nothing may
// run any more: the Guard is closing, or the caller hung up (without
// Detach). Then the claim is released, since the caller is told that
// nothing ran. A lease already half spent (the claim's outcome had to be
// settled by re-reading) is renewed before the operation starts.
func (g *Guard) own(ctx context.Context, p prepared, o owned, kind EventKind) (Result, error) {
	switch {
	case g.lifetime.Err() != nil:
		o.freeSlot()
		g.release(p, o)
		return Result{}, &StoreError{Op: "claim", Err: ErrShuttingDown}
	case ctx.Err() != nil && !p.detach:
		o.freeSlot()
		g.release(p, o)
		return Result{}, &StoreError{Op: "claim", Err: context.Cause(ctx)}
	}
	if time.Since(o.leaseFrom) > p.settings.StaleAfter/2 {
		began := time.Now()
		sctx, cancel := g.writeCtx(ctx)
		ok, err := g.store.Heartbeat(sctx, o.id, o.nonce)
		cancel()
		if err == nil && !ok {
			// Taken over while this call settled its claim: nothing
			// ran here, and the row says what the caller gets.
			if res, answered := g.answerFromRow(ctx, p); answered {
				o.freeSlot()
				return res, nil
			}
			err = ErrOwnershipLost
		}
		if err != nil {
			o.freeSlot()
			g.release(p, o)
			return Result{}, g.storeErr(ctx, p, "heartbeat", err)
		}
		o.leaseFrom = began
	}
	g.emit(Event{Kind: kind, Scope: p.scope})
	return p.delivery.run(ctx, g, p, o)
}

// runOwned runs the operation under the claim o, with the heartbeat keeping
// its lease, and records the outcome.
func (g *Guard) runOwned(ctx context.Context, p prepared, op Operation, o owned) (Result, error) {
	defer o.freeSlot()
	parent := ctx
	if p.detach {
		parent = context.WithoutCancel(ctx)
	}
	opCtx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	runCtx := opCtx
	if p.timeout > 0 {
		var cancelTimeout context.CancelFunc
		runCtx, cancelTimeout = context.WithTimeout(opCtx, p.timeout)
		defer cancelTimeout()
	}

	hb := g.startHeartbeat(p, o, cancel)
	defer hb.stop()
	g.running.add(hb) // Close cancels it (cause ErrShuttingDown)
	defer g.running.remove(hb)
	runCtx = hb.carrying(runCtx)
	// The operation's duration is only ever reported to Config.Observe:
	// without an observer the clock is not read for it.
	observed := g.cfg.Observe != nil
	var start time.Time
	if observed {
		start = g.now()
	}
	value, opErr := callOperation(runCtx, op)
	var elapsed time.Duration
	if observed {
		elapsed = g.now().Sub(start)
	}

	out := g.outcomeOf(p, o, runCtx, value, opErr)
	g.emit(Event{Kind: EventOperation, Tenant: p.tenant, Scope: p.scope, Duration: elapsed, StopReason: out.env.StopReason,
		Failed: out.status == store.RowFailed, Usage: out.usage})
	res, stored := g.encodeOutcome(p, o, &out)
	if hb.takenOver() {
		// Another caller owns the row now; writing would overwrite its state.
		res.LostClaim = true
		g.emit(Event{Kind: EventLostClaim, Scope: p.scope})
		g.log.Warn("guard: claim lost while running; result not stored", g.attrs(p, slog.Int("attempt", o.attempt))...)
		return res, out.invalid
	}
	// The heartbeat keeps running: the commit is retried while the lease holds.
	return g.commit(ctx, p, o, hb, res, stored, out.status, out.document != nil), out.invalid
}

// outcome is what an operation's return became: the answer and status to
// store, and the errors to report.
type outcome struct {
	env      sanitize.Envelope
	document []byte // the kept document (Call.Keep); nil for an envelope
	header   http.Header
	dropped  []string
	usage    Usage
	code     int
	status   store.RowStatus
	// opErr is the operation's own error (Result.Err); invalid is a
	// programming error of the operation, never an upstream failure: a
	// result that is not a JSON object, or an error the operation itself
	// marked ErrInvalidResult.
	opErr, invalid error
}

// outcomeOf sanitizes the operation's value, or classifies its error.
func (g *Guard) outcomeOf(p prepared, o owned, runCtx context.Context, value any, opErr error) outcome {
	out := outcome{status: store.RowSucceeded}
	switch {
	case opErr == nil:
		report := func(name string) { out.dropped = append(out.dropped, name) }
		out.usage = usageOf(value)
		var err error
		if p.keep != nil {
			out.document, out.code, out.header, err = toDocument(value, p.keep, g.policy.MaxBytes, report)
		} else {
			out.env, out.code, out.header, err = toEnvelope(value, report)
		}
		if err != nil {
			out.invalid = fmt.Errorf("%w: %w", ErrInvalidResult, err)
		}
		g.reportDropped(p, out.dropped)
	case errors.Is(opErr, ErrInvalidResult):
		out.invalid, opErr = opErr, nil
	}
	switch {
	case out.invalid != nil:
		out = outcome{status: store.RowFailed, opErr: out.invalid, invalid: out.invalid,
			env: sanitize.Failure(sanitize.Unknown), code: http.StatusInternalServerError}
		g.log.Error("guard: the operation's result is invalid (a programming error, not an upstream failure); stored as failed with stop reason unknown",
			g.attrs(p, slog.Int("attempt", o.attempt), slog.String("value_type", fmt.Sprintf("%T", value)), slog.Any("err", out.invalid))...)
	case opErr != nil:
		out.status, out.opErr = store.RowFailed, opErr
		reason := g.classify(p, runCtx, opErr)
		out.env, out.code = sanitize.Failure(reason), http.StatusBadGateway
		if reason == sanitize.InvalidInput {
			// The upstream rejected the inputs themselves: final for them.
			out.code = http.StatusUnprocessableEntity
		}
		g.logOpError(p, o, opErr, reason)
	}
	return out
}

// encodeOutcome encodes the answer within the size limit and returns the
// Result the caller gets, before it is stored, and the bytes to store.
func (g *Guard) encodeOutcome(p prepared, o owned, out *outcome) (Result, []byte) {
	body := out.document
	if body == nil {
		var dropped bool
		var err error
		body, dropped, err = g.encode(out.env)
		if err != nil {
			// Unreachable for a sanitized envelope; store a bare failure rather than nothing.
			g.log.Error("guard: encoding the envelope failed", g.attrs(p, slog.Any("err", err))...)
			out.env, out.code, out.status = sanitize.Failure(sanitize.Unknown), http.StatusBadGateway, store.RowFailed
			body, _ = sanitize.Marshal(out.env)
		}
		if dropped {
			g.log.Warn("guard: envelope over the size limit; data dropped", g.attrs(p, slog.Int("limit_bytes", g.policy.MaxBytes))...)
			if out.env, err = sanitize.FromJSON(body); err != nil {
				out.env = sanitize.Failure(sanitize.Unknown)
			}
		}
	}
	res := Result{Status: StatusSucceeded, Envelope: out.env, Body: body, StatusCode: out.code,
		StopReason: cmp.Or(out.env.StopReason, sanitize.Completed), Attempt: o.attempt, FirstSeen: o.firstSeen,
		KeyHash: p.keyHash, Err: out.opErr, Header: out.header, DroppedFields: out.dropped, Usage: out.usage}
	if out.status == store.RowFailed {
		res.Status = StatusFailed
	}
	stored, err := encodeStored(body, out.document != nil, out.header, out.dropped, out.usage)
	if err != nil { // a header or name that does not encode: keep the answer itself
		g.log.Error("guard: encoding the stored answer failed; stored without its headers", g.attrs(p, slog.Any("err", err))...)
		stored, res.Header, res.DroppedFields = body, nil, nil
	}
	return res, stored
}

func callOperation(ctx context.Context, op Operation) (v any, err error) {
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return op(ctx)
}

// unwrap takes a Response apart: its status (200 by default), value and
// headers. nil, a nil pointer and a nil map mean a success without data.
func unwrap(v any) (int, any, http.Header, error) {
	code := http.StatusOK
	var header http.Header
	switch r := v.(type) {
	case Response:
		code, v, header = cmp.Or(r.StatusCode, http.StatusOK), r.Value, r.Header
	case *Response:
		if r != nil {
			code, v, header = cmp.Or(r.StatusCode, http.StatusOK), r.Value, r.Header
		}
	}
	if code < 100 || code > 599 {
		return 0, nil, nil, fmt.Errorf("status code %d out of range", code)
	}
	if v == nil {
		v = emptyObject
	} else if rv := reflect.ValueOf(v); (rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Map) && rv.IsNil() {
		v = emptyObject
	}
	if len(header) == 0 {
		header = nil
	}
	return code, v, header, nil
}

// usageOf is the Usage of a Response value.
func usageOf(v any) Usage {
	switch r := v.(type) {
	case Response:
		return r.Usage
	case *Response:
		if r != nil {
			return r.Usage
		}
	}
	return Usage{}
}

// toEnvelope sanitizes an operation's value, calling dropped with the name
// of each field the allowlist drops; any value that is not a JSON object is
// an error (ErrInvalidResult for the caller). An answer with a status of 400
// or more says no, so it is never stored as ok.
func toEnvelope(v any, dropped func(string)) (sanitize.Envelope, int, http.Header, error) {
	code, v, header, err := unwrap(v)
	if err != nil {
		return sanitize.Envelope{}, 0, nil, err
	}
	env, err := sanitize.FromValueReport(v, dropped)
	if errors.Is(err, sanitize.ErrNotObject) {
		err = fmt.Errorf("a %T is not a JSON object; return a struct, a map or a sanitize.Envelope", v)
	}
	if code >= http.StatusBadRequest {
		env.OK = false
		if env.StopReason == sanitize.Completed {
			env.StopReason = sanitize.InvalidInput
		}
	}
	return env, code, header, err
}

// toDocument keeps the fields of an operation's value that keep names, as
// the exact bytes every caller gets; a document over maxBytes is an error.
func toDocument(v any, keep *sanitize.Allowlist, maxBytes int, dropped func(string)) ([]byte, int, http.Header, error) {
	code, v, header, err := unwrap(v)
	if err != nil {
		return nil, 0, nil, err
	}
	doc, err := keep.Document(v, dropped)
	switch {
	case errors.Is(err, sanitize.ErrNotObject):
		return nil, 0, nil, fmt.Errorf("a %T is not a JSON object; return a struct, a map or JSON object bytes", v)
	case err != nil:
		return nil, 0, nil, err
	case len(doc) > maxBytes:
		return nil, 0, nil, fmt.Errorf("the kept document is %d bytes, over the stored limit of %d (Config.MaxResponseBytes)", len(doc), maxBytes)
	}
	return doc, code, header, nil
}

// emptyObject is what a nil result stands for: a success without data.
var emptyObject = json.RawMessage(`{}`)

// encode is g.policy.EncodeReport(env) for an envelope that is already
// sanitized, as every envelope here is (it comes from sanitize.FromValue or
// sanitize.Failure): EncodeReport marshals, sanitizes the encoding again and
// marshals once more, and for a sanitized envelope that gives exactly
// Marshal(env) (sanitize's fuzz test holds FromJSON(Marshal(e)) == e). So one
// Marshal is enough while the envelope fits the size limit; over it,
// EncodeReport applies the size policy as before.
func (g *Guard) encode(env sanitize.Envelope) ([]byte, bool, error) {
	env.Cached = false
	if body, err := sanitize.Marshal(env); err == nil && len(body) <= g.policy.MaxBytes {
		return body, false, nil
	}
	return g.policy.EncodeReport(env)
}

func (g *Guard) classify(p prepared, ctx context.Context, err error) sanitize.StopReason {
	var sr stopReasoner
	var pe *PanicError
	cause := context.Cause(ctx)
	switch {
	case errors.As(err, &sr) && (sr.StopReason() != sanitize.Canceled || errors.Is(cause, ErrCanceled) || g.defect(testhooks.DefectSelfCancel)):
		// canceled only for a recorded cancel (Guard.Cancel, read back by the
		// heartbeat): it gives the attempt back. An operation that reports
		// it on its own (its HTTP client was cancelled) failed like any
		// other, and its attempt counts.
		return sanitize.ParseStopReason(string(sr.StopReason()))
	case errors.As(err, &pe):
		return sanitize.Unknown
	case errors.Is(cause, ErrCanceled):
		return sanitize.Canceled
	case errors.Is(cause, ErrShuttingDown), errors.Is(cause, ErrOwnershipLost):
		// Cut off by Close, or by its own lease running out: the operation
		// may have done part of its work.
		if p.settings.StalePolicy == StaleFail {
			return sanitize.Abandoned
		}
		return sanitize.Timeout
	case errors.Is(err, context.DeadlineExceeded), errors.Is(cause, context.DeadlineExceeded):
		return sanitize.Timeout
	}
	return sanitize.ProviderError
}

func (g *Guard) logOpError(p prepared, o owned, err error, reason sanitize.StopReason) {
	var pe *PanicError
	if errors.As(err, &pe) {
		// The panic value may hold user data: log its type and the stack only.
		g.log.Error("guard: operation panicked", g.attrs(p, slog.Int("attempt", o.attempt),
			slog.String("panic_type", fmt.Sprintf("%T", pe.Value)), slog.String("stack", string(pe.Stack)))...)
		return
	}
	attrs := g.attrs(p, slog.Int("attempt", o.attempt),
		slog.String("stop_reason", string(reason)), slog.String("err_type", fmt.Sprintf("%T", err)))
	// An upstream's answer is logged by its status code only: its body may
	// echo the inputs.
	var us interface{ UpstreamStatus() int }
	if errors.As(err, &us) {
		attrs = append(attrs, slog.Int("upstream_status", us.UpstreamStatus()))
	}
	g.log.Warn("guard: operation failed", attrs...)
}
