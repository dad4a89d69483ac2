package idemguard

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/idemguard/idemguard/internal/live"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// maxRaces bounds how often one call re-reads after losing a guarded write
// without waiting; each lost race means another caller made progress, so a
// healthy store never comes near it.
const maxRaces = 16

// claimLoop is one call's way through the claim protocol after the replay
// cache missed: claim the row or read it, then answer from the row or make
// the one transition its state allows, and read again after every race it
// lost, until the call owns the row (and runs the operation) or has an
// answer. Each row state has its own method; reclaim is the one way to win
// an existing row.
type claimLoop struct {
	g   *Guard
	ctx context.Context
	p   prepared

	// waitUntil ends a Call.Wait (zero: answer in progress at once); poll
	// paces the re-reads while waiting, waited adds them up.
	waitUntil time.Time
	poll      backoff
	waited    time.Duration

	// unconfirmed are this call's claim writes whose outcome was unknown
	// and that no read has shown yet. A row holding one is ours: decide by
	// the row, never by the error. Those the call ends up not owning are
	// released later if they land after the call has answered without them
	// (the server may complete a statement after the client gave up on it).
	unconfirmed []pendingClaim
	ownedNonce  string // the nonce of the claim the call runs under, once it owns one
	// unsure names the last write whose outcome was unknown: the next read
	// settles it (detached from the caller, retried within StoreTimeout).
	unsure  *unknownWrite
	lastErr error // the last claim write's error, for the caller if the races never end

	// waiter is this call's place among the key's waiters (Config.MaxWaiters).
	waiter *live.Ticket

	// slot is the release of this call's place under Call.Admit while it
	// writes a claim (nil: none held); own hands it to the execution.
	slot func()

	forceSpent bool      // Call.ForceNew: the call has read a row (reset.go)
	began      time.Time // when the claim loop began (local monotonic clock), for ForceNew
	needClaim  bool      // the row was absent at the last read: INSERT first
	checked    bool      // Call.Check ran (and passed)
	hasRead    bool      // the call has read the row at least once
	races      int       // lost races (and absent reads) in a row
	nonce      string
	readAt     time.Time // local time before this round's read, for the replay cache
	handedOn   bool      // execute handed the loop on to readOn, which finishes it
}

// errAgain is what a state method returns when the call must read the row
// again: it lost a race, its write's outcome is unknown, or it waited.
var errAgain = errors.New("idemguard: read the row again")

func (g *Guard) execute(ctx context.Context, p prepared) (Result, error) {
	l := claimLoop{g: g, ctx: ctx, p: p, needClaim: true, poll: newBackoff(p.settings.StaleAfter)}
	if p.force {
		l.began = time.Now() // only a forced call reads it (reset.go)
	}
	if p.wait > 0 {
		l.waitUntil = g.now().Add(p.wait)
	}
	// The first round's claim, with which a fresh key ends, runs on l
	// here, on the stack: the rounds that read the row hand the loop to
	// the delivery (an interface), which moves it to the heap, so l is
	// copied there (readOn) only when the call reads.
	defer l.finishHere()
	if err := l.mayGoOn(); err != nil {
		return Result{}, err
	}
	l.nonce, l.readAt = newNonce(), g.now()
	if res, err := l.insert(); err != errAgain {
		return res, err
	}
	l.handedOn = true // the copy finishes
	return l.readOn()
}

// readOn goes on with the claim loop from the read of a round whose
// claim INSERT sent the call to the read, or that claimed nothing.
func (l claimLoop) readOn() (Result, error) {
	l.handedOn = false
	defer l.finish()
	for {
		rec, err := l.read()
		if err == nil {
			var res Result
			if res, err = l.onRow(rec); err != errAgain {
				return res, err
			}
		} else if err != errAgain {
			return Result{}, err
		}
		if err := l.mayGoOn(); err != nil {
			return Result{}, err
		}
		l.nonce, l.readAt = newNonce(), l.g.now()
		if l.needClaim {
			if res, err := l.insert(); err != errAgain {
				return res, err
			}
		}
	}
}

// finishHere is finish, unless the loop was handed on to readOn.
func (l *claimLoop) finishHere() {
	if !l.handedOn {
		l.finish()
	}
}

// finish releases, later and in the background, the unconfirmed claims the
// call does not run under, and reports the time it waited.
func (l *claimLoop) finish() {
	var notOwned []pendingClaim
	for _, u := range l.unconfirmed {
		if u.nonce != l.ownedNonce {
			notOwned = append(notOwned, u)
		}
	}
	l.g.releaseLater(l.p, notOwned)
	l.dropSlot()
	l.releaseWaiter()
	if l.waited > 0 {
		l.g.emit(Event{Kind: EventWaited, Scope: l.p.scope, Duration: l.waited})
	}
}

// mayGoOn says why the call must stop claiming, if it must: the races never
// end, the Guard is closing, or the caller hung up (claiming then would
// only be released again).
func (l *claimLoop) mayGoOn() error {
	switch {
	case l.races > maxRaces:
		err := errors.New("too many lost races in a row")
		if l.lastErr != nil {
			err = fmt.Errorf("%w; last store error: %w", err, l.lastErr)
		}
		return &StoreError{Op: "claim", Err: err}
	case l.g.lifetime.Err() != nil:
		return &StoreError{Op: "claim", Err: ErrShuttingDown}
	case l.ctx.Err() != nil && !l.p.detach:
		return &StoreError{Op: "claim", Err: context.Cause(l.ctx)}
	}
	return nil
}

// insert tries the claim INSERT. A duplicate, or a write whose outcome is
// unknown (kept among the unconfirmed claims), sends the call to the read.
func (l *claimLoop) insert() (Result, error) {
	if err := l.check(); err != nil {
		return Result{}, err
	}
	if err := l.admit(); err != nil {
		return Result{}, err
	}
	sent := time.Now()
	audit := l.g.newAudit(l.p, store.AuditClaimed, l.p.keyHash, 1, time.Time{})
	id, err := l.g.claim(l.ctx, l.p, l.nonce, audit)
	switch {
	case err == nil:
		return l.own(owned{id: id, nonce: l.nonce, attempt: 1, firstSeen: l.g.now(), leaseFrom: sent, audit: audit}, EventClaimed)
	case notSent(err):
		return Result{}, l.g.storeErr(l.ctx, l.p, "claim", err) // nothing was written: nothing to settle
	case !errors.Is(err, store.ErrDuplicate):
		l.unconfirmed = append(l.unconfirmed, pendingClaim{nonce: l.nonce, sent: sent, kind: EventClaimed, audit: audit})
		l.unsure, l.lastErr = &unknownWrite{op: "claim", err: err}, err
	}
	return Result{}, errAgain
}

// read reads the row, settling the last unknown write if there is one;
// errAgain when there is none (see absent).
func (l *claimLoop) read() (store.Record, error) {
	g, p := l.g, l.p
	if len(l.unconfirmed) == 0 {
		l.dropSlot() // no write of this call may have claimed the row
	}
	l.hasRead = true
	settled := l.unsure
	l.unsure = nil
	var rec store.Record
	var err error
	if settled != nil {
		rec, err = g.settle(l.ctx, p, settled.op, settled.err)
	} else {
		rec, err = g.get(l.ctx, p)
	}
	if settled != nil && !outcomeUnknown(settled.err) && (err == nil || errors.Is(err, ErrNotFound)) {
		if _, ours := pendingIn(l.unconfirmed, rec); !ours || err != nil {
			// The store answered with an error (no such table or column, a
			// value too long, ...): the write did not apply, and trying
			// again cannot help. The row said so too.
			return store.Record{}, g.storeErr(l.ctx, p, settled.op, settled.err)
		}
	}
	if errors.Is(err, ErrNotFound) {
		return store.Record{}, l.absent(settled != nil)
	}
	if err != nil {
		return store.Record{}, g.storeErr(l.ctx, p, "read", err)
	}
	l.needClaim = false
	return rec, nil
}

// absent is the state without a row: the call's write did not land (yet),
// the row was deleted since (cleanup, a released claim), or a multi-primary
// loser read before the winner's commit. The call claims again after a
// pause that grows, longer after an unknown outcome (the store is in
// trouble).
func (l *claimLoop) absent(afterUnknown bool) error {
	l.backToCurrent() // previous secrets: claim under the current one (secrets.go)
	l.needClaim = true
	l.races++
	step := 5 * time.Millisecond
	if afterUnknown {
		step = 50 * time.Millisecond
	}
	sleepCtx(l.ctx, jitter(min(time.Duration(l.races)*step, time.Second)))
	return errAgain
}

// onRow answers from the row, or acts on it, by its state.
func (l *claimLoop) onRow(rec store.Record) (Result, error) {
	if u, ok := pendingIn(l.unconfirmed, rec); ok {
		// One of this call's own writes landed after all.
		return l.own(owned{id: rec.ID, nonce: u.nonce, attempt: rec.Attempts, firstSeen: rec.CreatedAt,
			leaseFrom: u.sent, prev: u.prev, audit: u.audit, replaced: u.replaced}, u.kind)
	}
	if res, err, done := l.p.delivery.resume(l, rec); done {
		return res, err
	}
	if rec.Reclaimable(l.p.settings.StaleAfter) {
		return l.expired(rec)
	}
	if rec.Fingerprint != l.p.fingerprint {
		// Only a client key can name a row with other inputs: a derived
		// key hashes the inputs themselves.
		l.g.emit(Event{Kind: EventMismatch, Scope: l.p.scope})
		l.g.noteConflict(l.p, rec.Attempts, rec.Now)
		return Result{}, ErrFingerprintMismatch
	}
	if l.p.force && !l.forceSpent {
		l.forceSpent = true // a call forces at most the first row it reads (reset.go)
		if l.replaceable(rec) {
			return l.forced(rec)
		}
	}
	switch rec.Status {
	case store.RowSucceeded:
		return l.succeeded(rec)
	case store.RowFailed:
		return l.failed(rec)
	case store.RowStarted:
		return l.started(rec)
	}
	return Result{}, l.g.storeErr(l.ctx, l.p, "read", fmt.Errorf("unknown row status %q", rec.Status))
}

// expired claims a row past its expiry as if it were absent: a new first
// attempt, whatever inputs it held.
func (l *claimLoop) expired(rec store.Record) (Result, error) {
	if l.backToCurrent() { // previous secrets: claim under the current one (secrets.go)
		return Result{}, errAgain
	}
	p := l.p
	return l.reclaim(store.ReclaimParams{Kind: store.ReclaimExpired, ID: rec.ID, OldNonce: rec.ClaimNonce,
		OldAttempts: rec.Attempts, NewNonce: l.nonce, Fingerprint: p.fingerprint, SecretID: p.secretID,
		TTL: p.settings.TTL, StaleAfter: p.settings.StaleAfter,
		Audit: l.g.newAudit(p, store.AuditExpiredReclaim, rec.KeyHash, 1, rec.Now)}, nil, EventClaimed, 1, time.Time{})
}

// succeeded replays the stored answer, unless the read is too old to
// answer from (a scope that allows resets: reset.go).
func (l *claimLoop) succeeded(rec store.Record) (Result, error) {
	if !l.g.fresh(l.p, l.readAt) {
		l.races++
		return Result{}, errAgain
	}
	return l.p.delivery.replay(l.ctx, l.g, l.p, rec, l.readAt)
}

// failed answers a final failure as stored, and retries any other while
// attempts remain.
func (l *claimLoop) failed(rec store.Record) (Result, error) {
	g, p := l.g, l.p
	st, err := decodeStored(rec)
	if err != nil {
		return Result{}, g.storeErr(l.ctx, p, "read", err)
	}
	env := st.env
	if final(env.StopReason) || rec.Attempts >= p.settings.MaxAttempts {
		if !g.fresh(p, l.readAt) {
			l.races++
			return Result{}, errAgain
		}
		if !final(env.StopReason) {
			env.StopReason = sanitize.RetryLimit
		}
		g.emit(Event{Kind: EventRetryLimit, Scope: p.scope, StopReason: env.StopReason})
		res := g.storedFailure(p, rec, env)
		g.noteReplay(p, res, rec.Now)
		return res, nil
	}
	prev := rec
	return l.reclaim(store.ReclaimParams{Kind: store.ReclaimFailed, ID: rec.ID, OldNonce: rec.ClaimNonce,
		OldAttempts: rec.Attempts, NewNonce: l.nonce, TTL: p.settings.TTL, MaxAttempts: p.settings.MaxAttempts,
		Audit: g.newAudit(p, store.AuditRetried, rec.KeyHash, rec.Attempts+1, rec.Now)},
		&prev, EventRetried, rec.Attempts+1, rec.CreatedAt)
}

// started waits for (or reports) a live owner; a stale one is taken over,
// or, under policy fail or without attempts left, marked failed.
func (l *claimLoop) started(rec store.Record) (Result, error) {
	g, p := l.g, l.p
	if !rec.Stale(p.settings.StaleAfter) {
		return l.running(rec)
	}
	if p.settings.StalePolicy == StaleFail || rec.Attempts >= p.settings.MaxAttempts {
		reason := sanitize.Abandoned
		if p.settings.StalePolicy != StaleFail {
			reason = sanitize.RetryLimit
		}
		if err := g.abandon(l.ctx, p, rec, reason); err != nil {
			return Result{}, err
		}
		l.races++
		return Result{}, errAgain // the re-read answers with the failed row
	}
	prev := rec
	return l.reclaim(store.ReclaimParams{Kind: store.ReclaimStale, ID: rec.ID, OldNonce: rec.ClaimNonce,
		OldAttempts: rec.Attempts, NewNonce: l.nonce, StaleAfter: p.settings.StaleAfter,
		Audit: g.newAudit(p, store.AuditTakeover, rec.KeyHash, rec.Attempts+1, rec.Now)},
		&prev, EventTakeover, rec.Attempts+1, rec.CreatedAt)
}

// running answers in progress, or, within Call.Wait, pauses before the
// next read.
func (l *claimLoop) running(rec store.Record) (Result, error) {
	g := l.g
	waiting := !l.waitUntil.IsZero() && g.now().Before(l.waitUntil) && l.ctx.Err() == nil
	if waiting || l.p.follow && l.ctx.Err() == nil {
		if res, err, done := l.p.delivery.attach(l, rec); done {
			return res, err
		}
	}
	if !waiting {
		g.emit(Event{Kind: EventInProgress, Scope: l.p.scope})
		g.noteInProgress(l.p, rec, l.inProgressDetail())
		return g.inProgress(l.p, rec), nil
	}
	if err := l.admitWaiter(); err != nil {
		return Result{}, err
	}
	l.races = 0
	start := g.now()
	sleepCtx(l.ctx, min(l.poll.next(), l.waitUntil.Sub(start)))
	l.waited += g.now().Sub(start)
	if l.ctx.Err() != nil || g.lifetime.Err() != nil { // the caller, or the Guard, stopped waiting
		g.emit(Event{Kind: EventInProgress, Scope: l.p.scope})
		g.noteInProgress(l.p, rec, store.InProgressWaited)
		return g.inProgress(l.p, rec), nil
	}
	return Result{}, errAgain
}

// inProgressDetail says how an in-progress answer came: at once, or after
// waiting (Call.Wait) for the key to finish.
func (l *claimLoop) inProgressDetail() string {
	if l.waited > 0 {
		return store.InProgressWaited
	}
	return store.InProgressAnswered
}

// reclaim makes the guarded transition rp. Won, the call runs the
// operation as attempt (firstSeen zero: now); lost or unknown, it reads the
// row again (an unknown outcome joins the unconfirmed claims).
func (l *claimLoop) reclaim(rp store.ReclaimParams, prev *store.Record, kind EventKind, attempt int, firstSeen time.Time) (Result, error) {
	if err := l.check(); err != nil {
		return Result{}, err
	}
	if err := l.admit(); err != nil {
		return Result{}, err
	}
	won, u := l.g.tryReclaim(l.ctx, l.p, rp, prev, kind)
	if won == nil {
		if u != nil && notSent(u.err) {
			return Result{}, l.g.storeErr(l.ctx, l.p, u.op, u.err) // nothing was written: nothing to settle
		}
		if u != nil {
			l.unconfirmed = append(l.unconfirmed, u.claim)
			l.unsure, l.lastErr = u, u.err
		}
		l.races++
		return Result{}, errAgain
	}
	if firstSeen.IsZero() {
		firstSeen = l.g.now()
	}
	won.attempt, won.firstSeen = attempt, firstSeen
	if kind == EventTakeover {
		l.g.log.Info("guard: took over a stale claim", l.g.attrs(l.p, slog.Int("attempt", attempt),
			slog.Duration("silent_for", prev.Now.Sub(prev.LastBeat())))...)
	}
	return l.own(*won, kind)
}

// check runs Call.Check before the call's first claim write.
func (l *claimLoop) check() error {
	if l.checked || l.p.check == nil {
		return nil
	}
	if err := l.p.check(); err != nil {
		return err
	}
	l.checked = true
	return nil
}

// admit takes a place under Call.Admit before a claim write. Refused
// before the row was read, the call reads it first (errAgain): a duplicate
// joins, a stored answer replays, and only a claim write is refused.
func (l *claimLoop) admit() error {
	if l.p.admit == nil || l.slot != nil {
		return nil
	}
	release, err := l.p.admit(l.p.keyHash)
	switch {
	case err != nil && !l.hasRead:
		return errAgain
	case err != nil:
		return err
	case release == nil:
		release = func() {}
	}
	l.slot = release
	return nil
}

// dropSlot gives back the place Call.Admit gave, if the call holds one.
func (l *claimLoop) dropSlot() {
	if l.slot != nil {
		l.slot()
		l.slot = nil
	}
}

// own runs the operation under the claim o.
func (l *claimLoop) own(o owned, kind EventKind) (Result, error) {
	l.g.landed(o.audit)        // the claim's durable audit event was written with it
	if len(l.p.versions) > 0 { // previous secrets: a claim runs only if no other secret's row counts (secrets.go)
		if err := l.crossCheck(o); err != nil {
			return Result{}, err
		}
	}
	o.slot, l.slot = l.slot, nil // the execution gives it back when it ends
	l.ownedNonce = o.nonce
	if o.replaced > 0 {
		return l.ownForced(o, kind)
	}
	return l.g.own(l.ctx, l.p, o, kind)
}

// final reports whether a stored failure is never retried: the inputs were
// rejected, the operation was abandoned, or it ran out of attempts.
func final(r sanitize.StopReason) bool {
	return r == sanitize.Abandoned || r == sanitize.RetryLimit || r == sanitize.InvalidInput
}

func (g *Guard) claim(ctx context.Context, p prepared, nonce string, audit *store.AuditEvent) (uint64, error) {
	ctx, cancel := g.writeCtx(ctx)
	defer cancel()
	return g.store.Claim(ctx, store.ClaimParams{Tenant: p.tenant, Scope: p.scope, KeyHash: p.keyHash,
		Fingerprint: p.fingerprint, Nonce: nonce, TTL: p.settings.TTL, Lease: p.settings.StaleAfter, SecretID: p.secretID,
		Audit: g.stored(audit)})
}

func (g *Guard) get(ctx context.Context, p prepared) (store.Record, error) {
	ctx, cancel := g.storeCtx(ctx)
	defer cancel()
	return g.store.Get(ctx, p.tenant, p.scope, p.keyHash)
}

// settle resolves a write whose outcome is unknown by re-reading the row,
// detached from the caller and bounded by StoreTimeout in all, with
// jittered pauses. ErrNotFound when there is no row. Any other error means
// the row could not be read either: the caller is told nothing ran.
func (g *Guard) settle(ctx context.Context, p prepared, op string, cause error) (store.Record, error) {
	ctx = context.WithoutCancel(ctx)
	deadline := time.Now().Add(g.cfg.StoreTimeout)
	pause := 20 * time.Millisecond
	for {
		sctx, cancel := context.WithDeadline(ctx, deadline)
		rec, err := g.store.Get(sctx, p.tenant, p.scope, p.keyHash)
		cancel()
		if err == nil || errors.Is(err, ErrNotFound) {
			return rec, err
		}
		if time.Until(deadline) < pause {
			return store.Record{}, g.storeErr(ctx, p, op, cause)
		}
		sleepCtx(ctx, jitter(pause))
		pause = min(2*pause, time.Second)
	}
}

// outcomeUnknown reports whether a failed write may have applied: the store
// says so (ErrOutcomeUnknown), or no answer came (a timeout, a broken
// connection), unless the store proved that nothing was sent (notSent). Any
// other error is the store's answer that the statement failed.
func outcomeUnknown(err error) bool {
	if notSent(err) {
		return false
	}
	var ne net.Error
	return errors.Is(err, store.ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, context.Canceled) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne)
}

// notSent reports whether the store proved that a call never reached the
// database (store.ErrNotSent): the outcome is known, nothing was written, and
// the call answers ErrStoreUnavailable at once instead of settling it by
// re-reading. An error that also says the outcome is unknown is unknown.
func notSent(err error) bool {
	return errors.Is(err, store.ErrNotSent) && !errors.Is(err, store.ErrOutcomeUnknown)
}

// pendingClaim is a claim write (INSERT or guarded UPDATE) whose outcome
// was unknown: it may have landed, or may land later.
type pendingClaim struct {
	nonce string
	// guard is the nonce a Reclaim's UPDATE is guarded by ("" for a Claim's
	// INSERT). The row holding neither it nor nonce does not mean the
	// UPDATE can no longer land: a Release may put the guard back.
	guard string
	prev  *store.Record // the row before a Reclaim, for Release
	sent  time.Time     // when the write was sent: the earliest its lease can count from
	kind  EventKind     // what owning it means
	// landed: the write is known to have landed (a release that failed).
	landed bool
	// audit is the durable event the write carries (nil: auditing off).
	audit *store.AuditEvent
	// replaced: the attempt a forced run's write replaces (0: not forced).
	replaced int
}

// unknownWrite is a claim write whose outcome the next read settles.
type unknownWrite struct {
	op    string
	err   error
	claim pendingClaim
}

// pendingIn returns the unconfirmed claim rec holds, if any. A claim INSERT
// and a Reclaim of one round share their nonce: a row holding it is the
// Reclaim's when it is the row that Reclaim took (its id), and must then be
// given back as that Reclaim's (restored), never deleted as the INSERT's.
func pendingIn(unconfirmed []pendingClaim, rec store.Record) (pendingClaim, bool) {
	if rec.Status != store.RowStarted {
		return pendingClaim{}, false
	}
	var found pendingClaim
	ok := false
	for _, u := range unconfirmed {
		if rec.ClaimNonce != u.nonce {
			continue
		}
		if u.prev != nil && u.prev.ID == rec.ID {
			return u, true
		}
		if !ok {
			found, ok = u, true
		}
	}
	return found, ok
}

// tryReclaim makes the guarded transition rp and, when it won, returns the
// claim it holds. An unknown outcome is returned as u: the caller keeps the
// claim among its unconfirmed ones and settles it by re-reading the row
// (decide by the row, never by the error). prev is the row as read, for Release.
func (g *Guard) tryReclaim(ctx context.Context, p prepared, rp store.ReclaimParams, prev *store.Record, kind EventKind) (won *owned, u *unknownWrite) {
	rp.Lease = p.settings.StaleAfter
	sent := time.Now()
	sctx, cancel := g.writeCtx(ctx)
	sp := rp
	sp.Audit = g.stored(rp.Audit)
	ok, err := g.store.Reclaim(sctx, sp)
	cancel()
	switch {
	case err != nil:
		return nil, &unknownWrite{op: "reclaim " + rp.Kind.String(), err: err,
			claim: pendingClaim{nonce: rp.NewNonce, guard: rp.OldNonce, prev: prev, sent: sent, kind: kind, audit: rp.Audit,
				replaced: replacedBy(rp)}}
	case ok:
		return &owned{id: rp.ID, nonce: rp.NewNonce, leaseFrom: sent, prev: prev, audit: rp.Audit, replaced: replacedBy(rp)}, nil
	}
	return nil, nil
}

// replacedBy is the attempt a forced reclaim replaces (0: rp is not one).
func replacedBy(rp store.ReclaimParams) int {
	if rp.Kind == store.ReclaimForced {
		return rp.OldAttempts
	}
	return 0
}

func (g *Guard) abandon(ctx context.Context, p prepared, rec store.Record, reason sanitize.StopReason) error {
	body, err := sanitize.Marshal(sanitize.Failure(reason))
	if err != nil {
		return g.storeErr(ctx, p, "abandon", err)
	}
	ctx, cancel := g.writeCtx(ctx)
	defer cancel()
	audit := g.newAudit(p, store.AuditAbandoned, rec.KeyHash, rec.Attempts, rec.Now)
	if audit != nil {
		audit.StopReason = reason
	}
	won, err := g.store.Abandon(ctx, store.AbandonParams{ID: rec.ID, OldNonce: rec.ClaimNonce, OldAttempts: rec.Attempts,
		StaleAfter: p.settings.StaleAfter, Response: body, ResponseCode: http.StatusBadGateway, TTL: p.settings.TTL, Audit: g.stored(audit)})
	if err != nil {
		// Unknown outcome: the caller's next read of the row decides. A
		// store that is down fails that read.
		g.emit(Event{Kind: EventStoreError, Scope: p.scope, StoreOp: "abandon"})
		g.log.Warn("guard: abandoning a stale claim failed; re-reading", g.attrs(p, slog.Any("err", err))...)
		return nil
	}
	if won {
		g.landed(audit)
		g.emit(Event{Kind: EventAbandoned, Scope: p.scope, StopReason: reason})
		g.log.Warn("guard: stale claim marked failed instead of taken over", g.attrs(p,
			slog.String("stop_reason", string(reason)), slog.Int("attempt", rec.Attempts))...)
	}
	return nil
}
