package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/idemguardtest"
	"github.com/idemguard/idemguard/internal/eventdata"
	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/internal/testhooks"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
)

// Secret is the HMAC secret of the simulated guards.
var Secret = []byte("idemguard-simulation-secret-0123456789")

// Tenant and Scope of every simulated call.
const (
	Tenant = "sim"
	Scope  = "sim.op"
)

// Client is one caller of a key: it makes up to Calls calls, the next one after an
// in_progress answer or a store error.
type Client struct {
	Key     int
	Replica int
	At      time.Duration
	Calls   int
	Wait    time.Duration
	// HangUp, if positive, cancels each call's context this long after it started.
	HangUp time.Duration
	Detach bool
	// Async starts each call with Guard.Start (the operation runs in the background, the
	// call answers at once) instead of Do.
	Async bool
	// Stream makes each call a DoStream whose operation emits two events (one before its
	// work, one after it succeeded).
	Stream bool
	// Cancel makes the client a canceller: each of its calls asks the key's running
	// execution to stop (Guard.Cancel) instead of calling it.
	Cancel bool
	// Chunks is how many events a stream's operation emits once it succeeded (after the one
	// before its work); 0 or 1: one, as before.
	Chunks int
	// Slow makes the stream's writer take this long over each event (a slow client).
	Slow time.Duration
	// Stubborn makes the stream's operation outlive its cancellation: told to stop, it ends
	// its work (the history records the end then) but goes on emitting events for Linger
	// before it returns the error.
	Stubborn bool
	Linger   time.Duration
	// SelfCancel makes an operation that fails report stopReason canceled itself.
	SelfCancel bool
	// Documents makes the stream's operation write its events as a handler behind the
	// middleware may: each event's data several JSON documents on several data: lines, most
	// of them holding a blocked member at some depth. Each event is read as the middleware
	// reads it (internal/eventdata) before it is emitted: stored and relayed as cleaned.
	Documents bool
	// Reset makes the client a resetter: each of its calls resets the key (Guard.Reset);
	// Force makes each of its calls a forced one (Call.ForceNew). See reset.go.
	Reset, Force bool
	// Added: a client the later choices added (a follower beside a streamed client, the
	// parts of a takeover); Sync leaves it out.
	Added bool
}

// KeyPlan is one simulated key.
type KeyPlan struct {
	ClientKey string
	Spec      KeySpec
}

// keep is the allowlist of the keys whose answers are kept as documents (KeySpec.Keep).
var keep = sanitize.KeepAllBut()

// Scenario is everything a seed decides.
type Scenario struct {
	Seed         uint64
	Defect       Defect
	Lease        time.Duration
	StoreTimeout time.Duration
	Replicas     int
	Keys         []KeyPlan
	Clients      []Client
	Plans        []Plan
	// Skew is the store's clock minus the application's; Steps move it during the run.
	Skew      time.Duration
	Steps     []Step
	ReadFirst idemguardtest.ReadFirst
	CacheSize int
	// MaxStreamBytes is the guards' Config.MaxStreamBytes (0: the default).
	MaxStreamBytes int
	// AddedPauses are pauses the later choices added to the Plans (Simulate applies them).
	AddedPauses []AddedPause
	// Quiet is when the faults stop; Horizon is when every living call must have returned.
	Quiet, Horizon time.Duration
}

// Step moves the store's clock by By at At.
type Step struct{ At, By time.Duration }

// Real selects a scenario for a real store in real time: one lease of a second, fewer and
// shorter faults, and no clock skew (the database's clock is its own).
type Real bool

// Generate derives a scenario from seed.
func Generate(seed uint64, defect Defect, real Real) Scenario {
	rng := rand.New(rand.NewPCG(seed, 0x1de))
	// Choices added later draw from their own stream, so that every earlier choice of a seed
	// (and the seeds the docs cite) stays what it was.
	later := rand.New(rand.NewPCG(seed, 0xa57c))
	// The streams, documents and operations that report their own cancellation came later
	// still: a stream of their own again.
	newer := rand.New(rand.NewPCG(seed, 0x28))
	// The events of several JSON documents came last: a stream of their own.
	docs := rand.New(rand.NewPCG(seed, 0xd0c5))
	ndur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(newer.Int64N(int64(hi-lo)+1)) }
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	sc := Scenario{Seed: seed, Defect: defect, Replicas: 2 + rng.IntN(2)}
	sc.Lease = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}[rng.IntN(3)]
	sc.StoreTimeout = sc.Lease / time.Duration(3+rng.IntN(3))
	if real {
		sc.Lease, sc.StoreTimeout, sc.Replicas = time.Second, 300*time.Millisecond, 2
	}
	L := sc.Lease
	sc.ReadFirst = []idemguardtest.ReadFirst{idemguardtest.ReadFirstAdaptive, idemguardtest.ReadFirstAlways, idemguardtest.ReadFirstNever}[rng.IntN(3)]
	sc.CacheSize = []int{-1, 0}[rng.IntN(2)]
	nkeys := 1 + rng.IntN(2)
	for k := range nkeys {
		spec := KeySpec{Lease: L, MaxAttempts: 2 + rng.IntN(3), Policy: idemguard.StaleTakeover}
		if rng.IntN(4) == 0 {
			spec.Policy = idemguard.StaleFail
		}
		spec.Keep = newer.IntN(4) == 0 && !bool(real)
		sc.Keys = append(sc.Keys, KeyPlan{ClientKey: fmt.Sprintf("k%d-%d", seed, k), Spec: spec})
		for range 3 + rng.IntN(4) {
			c := Client{Key: k, Replica: rng.IntN(sc.Replicas), At: dur(0, 3*L), Calls: 1 + rng.IntN(3)}
			if rng.IntN(5) < 3 {
				c.Wait = dur(0, 2*L)
			}
			if real { // fewer and shorter calls: real time is not free
				c.Calls, c.Wait = 1+rng.IntN(2), c.Wait/2
			}
			if rng.IntN(7) == 0 {
				c.HangUp = dur(0, 2*L)
			}
			c.Detach = rng.IntN(5) == 0
			switch later.IntN(8) {
			case 0, 1:
				c.Async = true
			case 2, 3:
				c.Stream = true
			case 4:
				c.Cancel = true
			}
			if newer.IntN(2) == 0 {
				c.Chunks = 2 + newer.IntN(30)
			}
			if newer.IntN(3) == 0 {
				c.Slow = ndur(0, L/50)
			}
			c.Stubborn, c.Linger = newer.IntN(3) == 0, ndur(0, 3*L)
			c.SelfCancel = newer.IntN(3) == 0
			c.Documents = docs.IntN(2) == 0
			if real { // real time is not free
				c.Chunks, c.Slow, c.Stubborn, c.SelfCancel, c.Documents = 0, 0, false, false, false
			}
			sc.Clients = append(sc.Clients, c)
			if c.Stream && newer.IntN(2) == 0 && !bool(real) {
				// A follower in the same process, slower than the owner it may follow,
				// arriving while the operation may run, or later, when its claim may have
				// been taken over by another process while the operation outlives it.
				after := ndur(0, L/4)
				if newer.IntN(2) == 0 {
					after = ndur(L, 3*L)
				}
				sc.Clients = append(sc.Clients, Client{Key: k, Replica: c.Replica, At: c.At + after, Calls: 1,
					Wait: 3 * L, Stream: true, Slow: ndur(0, L/20), Chunks: c.Chunks, Documents: c.Documents, Added: true})
			}
		}
	}
	if newer.IntN(3) > 0 && !bool(real) {
		sc.MaxStreamBytes = 48 + newer.IntN(400) // a stream of a dozen events or more is not stored
	}
	if newer.IntN(4) == 0 && !bool(real) {
		sc.takeover(newer, ndur)
	}
	if !real {
		// The resetters and forcers came last: a stream of their own.
		sc.addResets(rand.New(rand.NewPCG(seed, 0x7e5e7)))
	}
	sc.Quiet = 6 * L
	rates := []float64{0, 0.05, 0.15, 0.3}
	if real {
		sc.Quiet, rates = 4*L, []float64{0, 0.05, 0.1}
	}
	crash := -1
	if rng.IntN(4) == 0 {
		crash = rng.IntN(sc.Replicas - 1) // never the last: the probes need a living replica
	}
	for r := range sc.Replicas {
		p := Plan{Rate: rates[rng.IntN(len(rates))], MaxDelay: 2 * L, Answered: sc.StoreTimeout, Quiet: sc.Quiet}
		if real {
			p.MaxDelay = L
		}
		for range rng.IntN(3) {
			from := dur(0, 4*L)
			p.Outages = append(p.Outages, Window{from, from + dur(L/10, 3*L/2)})
		}
		if rng.IntN(3) == 0 {
			from := dur(0, 4*L)
			p.Pauses = append(p.Pauses, Window{from, from + dur(L/4, 2*L)})
		}
		if r == crash {
			p.CrashAt = dur(L/2, 5*L)
		}
		sc.Plans = append(sc.Plans, p)
	}
	if !real {
		sc.Skew = dur(-time.Hour, time.Hour)
		// Back by up to half a lease, or forward by at most half the owners' margin in all:
		// an owner stops leaseMargin before its lease ends, and that margin is what absorbs a
		// store clock that jumps ahead (the checker keeps the other half).
		ahead := leaseMargin(L) / 2
		for range rng.IntN(4) {
			by := dur(-L/2, ahead)
			if by > 0 {
				ahead -= by
			}
			sc.Steps = append(sc.Steps, Step{At: dur(0, sc.Quiet), By: by})
		}
	}
	sc.Horizon = sc.Quiet + 60*L + 2*time.Minute
	if real {
		sc.Horizon = sc.Quiet + 12*L
	}
	return sc
}

// takeover adds a stream whose operation outlives its claim: its replica pauses (its
// heartbeats stall, the lease runs out, the operation is told to stop and goes on emitting
// for three leases), a caller on another replica takes the key over once it is stale, and a
// follower on the paused replica reads the row after the pause, while the old operation
// still runs there.
func (sc *Scenario) takeover(newer *rand.Rand, ndur func(lo, hi time.Duration) time.Duration) {
	L := sc.Lease
	k, at := newer.IntN(len(sc.Keys)), ndur(0, 3*L)
	p, other := newer.IntN(sc.Replicas), newer.IntN(sc.Replicas-1)
	if other >= p {
		other++
	}
	pause := at + L/10
	sc.AddedPauses = append(sc.AddedPauses, AddedPause{Replica: p, Window: Window{pause, pause + 3*L/2}})
	sc.Clients = append(sc.Clients,
		Client{Key: k, Replica: p, At: at, Calls: 1, Stream: true, Chunks: 2 + newer.IntN(10), Stubborn: true, Linger: 3 * L, Added: true},
		Client{Key: k, Replica: other, At: at + 13*L/10 + ndur(0, L/4), Calls: 2, Wait: 2 * L, Stream: newer.IntN(2) == 0, Added: true},
		Client{Key: k, Replica: p, At: at + 17*L/10 + ndur(0, L/2), Calls: 1, Wait: 3 * L, Stream: true, Added: true})
}

// AddedPause is a pause of one replica that the later choices added; Sync leaves it out.
type AddedPause struct {
	Replica int
	Window  Window
}

// withAdded returns sc with its added pauses in its replicas' plans.
func (sc Scenario) withAdded() Scenario {
	if len(sc.AddedPauses) == 0 {
		return sc
	}
	sc.Plans = slices.Clone(sc.Plans)
	for _, a := range sc.AddedPauses {
		p := &sc.Plans[a.Replica]
		p.Pauses = append(slices.Clone(p.Pauses), a.Window)
	}
	return sc
}

// skewAt is the store clock's offset d after the start.
func (sc Scenario) skewAt(d time.Duration) time.Duration {
	s := sc.Skew
	for _, st := range sc.Steps {
		if d >= st.At {
			s += st.By
		}
	}
	return s
}

// Env is the store a scenario runs on.
type Env struct {
	// Store is the shared store (the in-memory store, MySQL); the run wraps it in a Recorder and
	// one Faults layer per replica.
	Store store.Store
	// Rows returns the store's rows when the run ends (nil: not checked).
	Rows func() []store.Record
	// Start is the run's time zero; StoreTime (nil: the same clock) maps a local time to the
	// store's clock.
	Start     time.Time
	StoreTime func(time.Time) time.Time
	// StrictLease: see Limits.StrictLease (true for the in-memory store in virtual time).
	StrictLease bool
	// Trail, when set, turns the guards' audit trail on (written to the store) and returns
	// the store's trail when the run ends, for the audit invariant (VAudit).
	Trail func() []store.AuditEvent
}

// Sync returns sc with every client calling Do: a seed as it ran before Async clients
// were added to the mix (the seeds the regression test and the docs cite), without the
// kept documents, the operations that report their own cancellation and the events of
// several JSON documents added later.
func (sc Scenario) Sync() Scenario {
	sc.Clients = slices.DeleteFunc(slices.Clone(sc.Clients), func(c Client) bool { return c.Added })
	for i := range sc.Clients {
		sc.Clients[i].Async, sc.Clients[i].Stream, sc.Clients[i].Cancel = false, false, false
		sc.Clients[i].SelfCancel, sc.Clients[i].Documents = false, false
	}
	sc.Keys = slices.Clone(sc.Keys)
	for i := range sc.Keys {
		sc.Keys[i].Spec.Keep, sc.Keys[i].Spec.AllowReset = false, false
	}
	sc.MaxStreamBytes, sc.AddedPauses = 0, nil
	return sc
}

// NewMemoryEnv returns an in-memory store whose clock is sc's skewed clock, starting now.
func NewMemoryEnv(sc Scenario) Env {
	start := time.Now()
	ms := memstore.New(memstore.WithClock(func() time.Time {
		now := time.Now()
		return now.Add(sc.skewAt(now.Sub(start)))
	}))
	return Env{Store: ms, Rows: ms.Rows, Trail: ms.AuditEvents, Start: start, StrictLease: true,
		StoreTime: func(t time.Time) time.Time { return t.Add(sc.skewAt(t.Sub(start))) }}
}

// KeyHash is the key_hash the guard derives for a simulated call with clientKey.
func KeyHash(secret []byte, tenant, scope, clientKey string, inputs any) string {
	d, err := keys.New(secret)
	if err != nil {
		panic(err)
	}
	canonical, err := keys.CanonicalizeValue(inputs)
	if err != nil {
		panic(err)
	}
	return d.KeyHash(tenant, scope, clientKey, canonical)
}

type run struct {
	sc      Scenario
	env     Env
	h       *History
	guards  []*idemguard.Guard
	faults  []*Faults
	crash   []chan struct{}
	ended   chan struct{}
	keys    []string
	clients sync.WaitGroup
	mu      sync.Mutex
	nextID  int
}

// Simulate runs sc on env and returns its history, ready for Check. Run it inside a
// testing/synctest bubble for virtual time (NewMemoryEnv), or in real time on a real store.
func Simulate(sc Scenario, env Env) *History {
	sc = sc.withAdded()
	h := NewHistory()
	h.StoreTime = env.StoreTime
	h.Limits.StoreTimeout = sc.StoreTimeout
	h.Limits.StrictLease = env.StrictLease
	h.Limits.MaxStreamBytes = cmp.Or(sc.MaxStreamBytes, idemguard.DefaultMaxStreamBytes)
	h.ReachableFrom = func(replica int, from, to time.Time) time.Time {
		p := sc.Plans[replica]
		for _, w := range append(append([]Window(nil), p.Outages...), p.Pauses...) {
			if end := env.Start.Add(w.To); env.Start.Add(w.From).Before(to) && end.After(from) {
				from = end
			}
		}
		return from
	}
	r := &run{sc: sc, env: env, h: h, ended: make(chan struct{})}
	rec := NewRecorder(env.Store, h)
	for i, p := range sc.Plans {
		f := NewFaults(rec, h, i, p, sc.Seed, env.Start, sc.Defect, r.ended)
		cfg := idemguard.Config{Store: f, Secret: Secret, Logger: slog.New(slog.DiscardHandler),
			StoreTimeout: sc.StoreTimeout, MaxWait: 3 * sc.Lease, ReplayCacheSize: sc.CacheSize,
			Audit: idemguard.AuditConfig{Store: env.Trail != nil}}
		cfg.MaxStreamBytes = sc.MaxStreamBytes
		idemguardtest.SetReadFirst(&cfg, sc.ReadFirst)
		if slices.Contains(EngineDefects, sc.Defect) {
			testhooks.ConfigKnobs(&cfg).Defect = testhooks.Defect(sc.Defect)
		}
		g, err := idemguard.New(cfg)
		if err != nil {
			panic(err)
		}
		r.faults, r.guards = append(r.faults, f), append(r.guards, g)
		crashed := make(chan struct{})
		r.crash = append(r.crash, crashed)
		if p.CrashAt > 0 {
			time.AfterFunc(time.Until(env.Start.Add(p.CrashAt)), func() {
				h.Crash(i, env.Start.Add(p.CrashAt))
				close(crashed)
			})
		}
	}
	for _, k := range sc.Keys {
		key := KeyOf(Tenant, Scope, KeyHash(Secret, Tenant, Scope, k.ClientKey, inputs(k)))
		r.keys = append(r.keys, key)
		h.SetKey(key, k.Spec)
	}
	for _, c := range sc.Clients {
		r.clients.Add(1)
		go r.client(c)
	}
	// Every call on a living replica returns long before the horizon; the calls of a crashed
	// replica stay blocked until the run ends. Without a crash the run goes on as soon as
	// every call has returned (real time is not free).
	allDone := make(chan struct{})
	go func() { r.clients.Wait(); close(allDone) }()
	horizon := time.NewTimer(time.Until(env.Start.Add(sc.Horizon)))
	select {
	case <-horizon.C:
	case <-allDone:
		horizon.Stop()
		// Late statements land and background releases finish within this.
		time.Sleep(max(2*sc.Lease, time.Until(env.Start.Add(sc.Quiet+2*sc.Plans[0].MaxDelay))))
	}
	// The probes: one call per key, on a living replica, once every lease has run out.
	time.Sleep(2 * sc.Lease)
	var probes sync.WaitGroup
	for k := range sc.Keys {
		probes.Go(func() {
			c := Client{Key: k, Replica: r.living(0), Calls: 1, Wait: 3 * sc.Lease}
			r.call(c, 0, true)
		})
	}
	probes.Wait()
	if env.Rows != nil {
		h.Final = env.Rows()
	}
	close(r.ended)
	r.clients.Wait()
	for _, g := range r.guards {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = g.Close(ctx)
		cancel()
	}
	for _, f := range r.faults {
		f.Wait()
	}
	if env.Trail != nil {
		h.Trail = env.Trail()
	}
	return h
}

func inputs(k KeyPlan) any { return map[string]any{"key": k.ClientKey} }

// living is the first replica from r that has not crashed.
func (r *run) living(from int) int {
	for i := range r.sc.Replicas {
		c := (from + i) % r.sc.Replicas
		at := r.sc.Plans[c].CrashAt
		if at == 0 || time.Since(r.env.Start) < at {
			return c
		}
	}
	return r.sc.Replicas - 1
}

func (r *run) client(c Client) {
	defer r.clients.Done()
	time.Sleep(time.Until(r.env.Start.Add(c.At)))
	if c.Cancel {
		r.cancels(c)
		return
	}
	if c.Reset {
		r.resets(c)
		return
	}
	for i := range c.Calls {
		res, err := r.call(c, i, false)
		if err == nil && res.Status != idemguard.StatusInProgress {
			return
		}
		time.Sleep(r.sc.Lease / 2)
	}
}

// cancels asks the key's running execution to stop, c.Calls times a lease apart, on the
// client's replica (whatever the answer: not running, finished, or the store down).
func (r *run) cancels(c Client) {
	k := r.sc.Keys[c.Key]
	hash := KeyHash(Secret, string(Tenant), Scope, k.ClientKey, inputs(k))
	for i := range c.Calls {
		ctx, cancel := context.WithTimeout(context.Background(), r.sc.Lease)
		g := r.guards[r.living(c.Replica+i)]
		if key, err := g.KeyOfHash(Tenant, Scope, hash); err == nil {
			_ = g.Cancel(ctx, key)
		}
		cancel()
		time.Sleep(r.sc.Lease)
	}
}

// call makes one Do call of client c (its i-th) and records it.
func (r *run) call(c Client, i int, probe bool) (idemguard.Result, error) {
	r.mu.Lock()
	id := r.nextID
	r.nextID++
	r.mu.Unlock()
	k := r.sc.Keys[c.Key]
	replica := r.living(c.Replica + i)
	ctx := WithCall(context.Background(), id)
	if c.HangUp > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		stop := time.AfterFunc(c.HangUp, cancel)
		defer stop.Stop()
		defer cancel()
	}
	call := idemguard.Call{Tenant: Tenant, Scope: Scope, ClientKey: k.ClientKey, Inputs: inputs(k),
		Settings: settingsOf(k), Wait: c.Wait, Detach: c.Detach, ForceNew: c.Force && !probe}
	if k.Spec.Keep {
		call.Keep = keep
	}
	a := r.h.Begin(id, r.keys[c.Key], replica, probe)
	if c.Stream && !probe {
		r.h.MarkStream(a)
		w := &eventLog{slow: c.Slow}
		res, err := r.guards[replica].DoStream(ctx, call, r.streamOp(id, replica, r.keys[c.Key], c), w)
		origin, events := w.all()
		r.h.FinishStream(a, res, err, origin, events, ctx.Err() != nil)
		return res, err
	}
	do := r.guards[replica].Do
	if c.Async && !probe {
		do = r.guards[replica].Start
	}
	res, err := do(ctx, call, r.op(id, replica, r.keys[c.Key], c, 0))
	r.h.Finish(a, res, err)
	return res, err
}

// streamOp is call id's operation as a stream: the event "<id>:1" before the work, and
// "<id>:2" (to "<id>:<1+c.Chunks>") once it succeeded (of a client with Documents, each
// as handlerEvent writes it, read as the middleware reads it); an answer stored by a plain
// call replays as "<id>:env" (a document as itself). A stubborn operation, told to stop,
// goes on emitting its events for c.Linger.
func (r *run) streamOp(id, replica int, key string, c Client) idemguard.StreamOperation {
	n := streamLength(c.Chunks)
	op := r.op(id, replica, key, c, n)
	defect := testhooks.GuardDefect(r.guards[replica])
	send := func(emit func(idemguard.Chunk), i int) {
		if !c.Documents {
			emit(idemguard.Chunk{Data: []byte(streamEventOf(id, i, false))})
			return
		}
		// What the middleware does with each event its handler writes.
		if e, _, refused, ok := eventdata.Parse(handlerEvent(id, i), defect); ok && !refused {
			emit(e)
		}
	}
	return idemguard.StreamOperation{Run: func(ctx context.Context, emit func(idemguard.Chunk)) (any, error) {
		send(emit, 1)
		v, err := op(ctx)
		if err == nil {
			for i := 2; i <= n; i++ {
				send(emit, i)
			}
		} else if c.Stubborn && ctx.Err() != nil && !errors.Is(err, ErrDead) {
			// Its work ended when it was told to stop (the history says so); it goes on
			// streaming, and answers as if nothing had happened.
			for i := 2; i <= n; i++ {
				time.Sleep(c.Linger / time.Duration(n))
				send(emit, i)
			}
			return successBody(id, replica, n), nil
		}
		return v, err
	}, Replay: func(env sanitize.Envelope) []idemguard.Chunk {
		// An answer stored by a plain call, rendered as one event naming its execution.
		return []idemguard.Chunk{{Data: []byte(fmt.Sprintf("%v:env", env.Data["call"]))}}
	}}
}

// streamEventOf is the data of the n-th event of call's stream, as its callers get it: of
// a stream of Documents, two JSON documents, one per line, with no blocked member.
func streamEventOf(call, n int, documents bool) string {
	if !documents {
		return fmt.Sprintf("%d:%d", call, n)
	}
	second := `{"delta":"x"}`
	if n%3 == 2 {
		second = `{"delta":"x","usage":{"tokens":1}}`
	}
	return fmt.Sprintf("{\"event\":\"%d:%d\"}\n%s", call, n, second)
}

// handlerEvent is the n-th event of call's stream of Documents as a handler writes it (the
// block, without the blank line that ends it): streamEventOf's two documents on two data:
// lines, with a blocked member in the first (prompt), in the second one level down
// (usage.model), or in neither, by turns.
func handlerEvent(call, n int) []byte {
	first, second := `,"prompt":"CANARY"`, `{"delta":"x"}`
	switch n % 3 {
	case 2:
		first, second = "", `{"delta":"x","usage":{"tokens":1,"model":"CANARY"}}`
	case 0:
		first = ""
	}
	return fmt.Appendf(nil, "data: {\"event\":\"%d:%d\"%s}\ndata: %s", call, n, first, second)
}

// successBody is what call id's operation answers when it succeeds; a stream of more than
// two events names their number.
func successBody(id, replica, events int) map[string]any {
	data := map[string]any{"call": id, "replica": replica}
	if events > 2 {
		data["chunks"] = events
	}
	return map[string]any{"ok": true, "traceId": fmt.Sprintf("call-%d", id), "data": data}
}

// streamLength is how many events a stream emits when it succeeds.
func streamLength(chunks int) int { return 1 + max(chunks, 1) }

// streamEvents are the events of call's stream of n events (of Documents if documents).
func streamEvents(call, n int, documents bool) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = streamEventOf(call, i+1, documents)
	}
	return out
}

// storedWhole reports whether a sequence of events fits maxBytes, so that it is stored
// with the answer (its wire form: "data: " before each of its lines, and a blank line).
func storedWhole(events []string, maxBytes int) bool {
	n := 0
	for _, e := range events {
		n += len("data: ")*(1+strings.Count(e, "\n")) + len(e) + 2
	}
	return n <= maxBytes
}

// eventLog is a streamed call's writer: it keeps the data of every event it gets, taking
// slow over each.
type eventLog struct {
	slow   time.Duration
	mu     sync.Mutex
	origin idemguard.StreamOrigin
	events []string
}

func (w *eventLog) Begin(s idemguard.StreamStart) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.origin = s.Origin
}

func (w *eventLog) Write(e idemguard.Chunk) error {
	if w.slow > 0 {
		time.Sleep(w.slow)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, string(e.Data))
	return nil
}

func (w *eventLog) all() (idemguard.StreamOrigin, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.origin, slices.Clone(w.events)
}

// op is call id's operation: it takes a time the seed chooses and fails when the seed says
// so; it stops when its context ends, and when its replica crashes. On a paused replica it
// is blocked until the pause ends (it still stops when its context ends: the guarantees are
// for operations that stop when told to).
//
// A stream's operation of more than two events names their number in its answer (chunks);
// one of a client with SelfCancel reports its failure as stopReason canceled.
func (r *run) op(id, replica int, key string, c Client, events int) idemguard.Operation {
	rng := rand.New(rand.NewPCG(r.sc.Seed, uint64(id)+0x09))
	took := r.sc.Lease/20 + time.Duration(rng.Int64N(int64(3*r.sc.Lease/2)))
	fail := rng.IntN(4) == 0
	return func(ctx context.Context) (any, error) {
		e := r.h.StartExec(key, id, replica)
		if events > 0 {
			r.h.StreamExec(e, events, c.Documents)
		}
		cut := func(err error) (any, error) {
			r.h.EndExec(e, time.Now(), true, true, nil)
			return nil, err
		}
		t := time.NewTimer(took)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return cut(context.Cause(ctx))
		case <-r.crash[replica]:
			r.h.EndExec(e, time.Now(), true, true, nil)
			<-r.ended
			return nil, ErrDead
		}
		at := time.Since(r.env.Start)
		for _, w := range r.sc.Plans[replica].Pauses {
			if w.has(at) {
				t := time.NewTimer(w.To - at)
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
					return cut(context.Cause(ctx))
				}
			}
		}
		if fail {
			r.h.EndExec(e, time.Now(), true, false, nil)
			reason := sanitize.ProviderError
			if c.SelfCancel {
				reason = sanitize.Canceled // as an operation whose HTTP client was cancelled may say
			}
			return nil, &idemguard.OpError{Reason: reason, Err: errors.New("sim: upstream failed")}
		}
		body := successBody(id, replica, events)
		r.h.EndExec(e, time.Now(), false, false, body)
		return body, nil
	}
}
