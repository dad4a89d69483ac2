package idemguard

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/idemguard/idemguard/internal/live"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// Start is Do for long-running operations: it claims the key like Do, and
// once the claim is won it returns at once, with Result.Accepted true and
// Status StatusInProgress, while op runs in the background in this process
// under the same lease, heartbeat and commit rules, detached from ctx. A
// duplicate while it runs gets StatusInProgress (Accepted false); a key
// already completed gets its stored answer, as from Do. Call.Wait is
// ignored and Call.Detach implied.
//
// The heartbeat of a background operation keeps the key's expires_at at
// least Settings.TTL ahead while it runs, and reads back cancel requests
// (Guard.Cancel): op's context is then cancelled with cause ErrCanceled.
// Follow the key with Guard.Watch or Guard.Lookup. Guard.WaitJobs waits for
// background operations (a shutdown's grace period); Guard.Close cuts off
// those still running and stores them as failed (retryable).
//
// Errors are those of Do; after WaitJobs or Close, a *StoreError wrapping
// ErrShuttingDown, without claiming anything.
func (g *Guard) Start(ctx context.Context, call Call, op Operation) (Result, error) {
	if op == nil {
		return Result{}, fmt.Errorf("%w: operation is nil", ErrInvalidInput)
	}
	if g.jobs.isDraining() {
		return Result{}, &StoreError{Op: "claim", Err: ErrShuttingDown}
	}
	return g.call(ctx, call, background{plain{op: op}})
}

// WaitJobs stops Start from accepting new operations (it then answers
// ErrShuttingDown), ends every Watch in this process (Next answers
// ErrShuttingDown: its client reconnects to another replica), and waits until every background operation has
// recorded its outcome, or ctx ends. Calls to Do are not affected; Close
// still has to be called.
func (g *Guard) WaitJobs(ctx context.Context) error {
	j := g.jobs
	j.mu.Lock()
	j.draining = true
	j.mu.Unlock()
	j.stop() // open watches end, so they do not hold the shutdown
	done := make(chan struct{})
	go func() { j.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runningJobs reports how many background operations run in this process.
func (g *Guard) runningJobs() int {
	j := g.jobs
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.running
}

// jobState is what a Guard keeps of its background operations.
type jobState struct {
	hub *live.Hub
	// stopping ends when WaitJobs begins: every Watch then ends.
	stopping context.Context
	stop     context.CancelFunc

	mu       sync.Mutex // guards draining, running, logs and wg.Add against WaitJobs' Wait
	draining bool
	running  int
	wg       sync.WaitGroup
	// logs are the live logs of the keys running here: watchers in this
	// process wake on their events instead of waiting for the next poll.
	logs map[live.Key]*live.Log
	// pollers read the rows of the keys watched here, one per key (poller.go).
	pollers rowPollers
}

func newJobState(cfg Config) *jobState {
	stopping, stop := context.WithCancel(context.Background())
	return &jobState{
		hub: live.NewHub(live.Config{MaxBytes: cmp.Or(cfg.MaxStreamBytes, DefaultMaxStreamBytes),
			MaxPerKey: cfg.MaxWatchersPerKey, MaxPerTenant: cfg.MaxWatchersPerTenant}),
		stopping: stopping,
		stop:     stop,
		logs:     map[live.Key]*live.Log{},
	}
}

func (j *jobState) isDraining() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.draining
}

// begin counts one more background operation of k, the execution r, and
// opens its live log, unless WaitJobs has begun.
func (j *jobState) begin(k live.Key, r live.Run) (*live.Log, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.draining {
		return nil, false
	}
	j.wg.Add(1)
	j.running++
	l := j.hub.Open(k, r)
	j.logs[k] = l
	return l, true
}

func (j *jobState) end(k live.Key, l *live.Log) {
	j.mu.Lock()
	if j.logs[k] == l {
		delete(j.logs, k)
	}
	j.running--
	j.mu.Unlock()
	l.Close(nil)
	j.pollers.nudge(k) // the row has its outcome
	j.wg.Done()
}

// notify wakes the watchers of k in this process, if k runs here.
func (j *jobState) notify(k live.Key, kind string) {
	j.mu.Lock()
	l := j.logs[k]
	j.mu.Unlock()
	if l != nil {
		l.Append(live.Event{Type: kind})
	}
	j.pollers.nudge(k)
}

func keyOf(p prepared) live.Key {
	return live.Key{Tenant: p.tenant, Scope: p.scope, KeyHash: p.keyHash}
}

// runInBackground runs the operation under the claim o after its caller
// has been answered: Accepted, in progress.
func (g *Guard) runInBackground(ctx context.Context, p prepared, op Operation, o owned) (Result, error) {
	k := keyOf(p)
	l, ok := g.jobs.begin(k, live.Run{Attempt: o.attempt, Nonce: o.nonce})
	if !ok {
		o.freeSlot()
		g.release(p, o)
		return Result{}, &StoreError{Op: "claim", Err: ErrShuttingDown}
	}
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer g.jobs.end(k, l)
		_, _ = g.runOwned(ctx, p, op, o) // the outcome is stored (or logged) by runOwned
	}()
	env := sanitize.Failure(sanitize.InProgress)
	body, _ := sanitize.Marshal(env)
	return Result{Status: StatusInProgress, Accepted: true, Envelope: env, Body: body, StatusCode: http.StatusAccepted,
		StopReason: sanitize.InProgress, Attempt: o.attempt, FirstSeen: o.firstSeen, KeyHash: p.keyHash}, nil
}

// renewOnce is one heartbeat of the claim: it renews the lease, keeps the
// row from expiring while it runs, and cancels the operation (cause
// ErrCanceled) when the row carries a cancel request.
func (hb *heartbeat) renewOnce(ctx context.Context) (bool, error) {
	p := hb.p
	pr := hb.progress.Load().take()
	r, err := hb.g.store.Renew(ctx, store.RenewParams{ID: hb.id, Nonce: hb.nonce, Extend: p.settings.TTL + hb.lease, Progress: pr})
	if err != nil {
		hb.progress.Load().untake(pr) // the next renewal carries it (or a later one)
	}
	if err != nil || !r.Renewed {
		return false, err
	}
	if r.CancelRequested && hb.cancelSeen.CompareAndSwap(false, true) {
		hb.cancel(ErrCanceled)
		hb.g.log.Info("guard: cancel requested; cancelling the operation", hb.g.attrs(p, slog.Int("attempt", hb.attempt))...)
	}
	p.delivery.beat(hb.g, p)
	return true, nil
}
