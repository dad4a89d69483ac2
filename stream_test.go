package idemguard_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/idemguardtest"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
)

// Streams: followers, the live log's bound and its binding to one
// execution, stored documents asked for as streams.

// chunks is a StreamWriter that keeps the data of what it was given; a
// non-nil gate holds every Write until it is closed (a slow client).
type chunks struct {
	mu     sync.Mutex
	origin idemguard.StreamOrigin
	data   []string
	gate   chan struct{}
	wrote  chan struct{}
}

func newChunks() *chunks { return &chunks{wrote: make(chan struct{}, 4096)} }

func (c *chunks) Begin(s idemguard.StreamStart) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.origin = s.Origin
}

func (c *chunks) Write(e idemguard.Chunk) error {
	if c.gate != nil {
		<-c.gate
	}
	c.mu.Lock()
	c.data = append(c.data, string(e.Data))
	c.mu.Unlock()
	c.wrote <- struct{}{}
	return nil
}

func (c *chunks) got() (idemguard.StreamOrigin, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.origin, append([]string(nil), c.data...)
}

func streamed(key string) idemguard.Call {
	return idemguard.Call{Tenant: "acme", Scope: "chat", ClientKey: key, Inputs: map[string]any{"q": key}, Detach: true}
}

// bigOp emits n events of size bytes each (named e1, e2, ...), waiting for
// start before the second one.
func bigOp(n, size int, start <-chan struct{}) idemguard.StreamOperation {
	return idemguard.StreamOperation{Run: func(ctx context.Context, emit func(idemguard.Chunk)) (any, error) {
		pad := strings.Repeat("x", size)
		for i := 1; i <= n; i++ {
			if i == 2 {
				<-start
			}
			emit(idemguard.Chunk{Data: []byte(fmt.Sprintf("e%d %s", i, pad))})
		}
		return map[string]any{"ok": true, "data": map[string]any{"events": n}}, nil
	}}
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, time.Millisecond, msg)
}

// streamAsync runs g.DoStream in a goroutine; the result arrives on the
// channel. An error fails the test (t.Error), and the result is still
// sent so the test ends.
func streamAsync(t *testing.T, g *idemguard.Guard, call idemguard.Call, op idemguard.StreamOperation, w idemguard.StreamWriter) <-chan idemguard.Result {
	done := make(chan idemguard.Result, 1)
	go func() {
		res, err := g.DoStream(context.Background(), call, op, w)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	return done
}

// slowFollower starts an owner streaming n events of size bytes under the
// key "big" and a follower whose writer is held until its gate is closed;
// it returns once the follower has attached, with the owner let past its
// first event.
func slowFollower(t *testing.T, g *idemguard.Guard, n, size int) (owner, slow *chunks, ownerDone, followerDone <-chan idemguard.Result) {
	start := make(chan struct{})
	owner = newChunks()
	ownerDone = streamAsync(t, g, streamed("big"), bigOp(n, size, start), owner)
	<-owner.wrote
	slow = newChunks()
	slow.gate = make(chan struct{})
	fc := streamed("big")
	fc.Wait = time.Minute
	followerDone = streamAsync(t, g, fc, bigOp(n, size, nil), slow)
	eventually(t, func() bool { o, _ := slow.got(); return o == idemguard.StreamAttached }, "the follower attaches")
	close(start)
	return owner, slow, ownerDone, followerDone
}

// A follower slower than the owner, of an answer too long to be stored
// with its events, is told its chunks are incomplete: never succeeded with
// a gap. Before the fix it was answered succeeded after one event of 128
// (the rest rebuilt from the envelope and skipped as already written).
func TestSlowFollowerOfAnOversizeStreamIsNotToldItSucceeded(t *testing.T) {
	b := setup(t)
	const n, size = 128, 16 << 10 // 2 MiB, over the default MaxStreamBytes
	owner, slow, ownerDone, followerDone := slowFollower(t, b.guard, n, size)
	res := <-ownerDone
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	_, got := owner.got()
	require.Len(t, got, n, "the owner's caller gets every event")

	close(slow.gate) // the slow client reads again: the log has dropped what it did not read
	fres := <-followerDone
	_, fgot := slow.got()
	require.Less(t, len(fgot), n)
	require.NotEqual(t, idemguard.StatusSucceeded, fres.Status,
		"a follower that missed events (%d of %d) must not be told it succeeded", len(fgot), n)
	for i, d := range fgot {
		require.True(t, strings.HasPrefix(d, fmt.Sprintf("e%d ", i+1)), "what it got has no gap")
	}
}

// The live log's bound is Config.MaxStreamBytes: an answer within it is
// kept whole, so a follower however slow gets every event, live.
func TestLiveLogKeepsWhatMaxStreamBytesStores(t *testing.T) {
	b := setup(t, func(c *idemguard.Config) { c.MaxStreamBytes = 4 << 20 })
	const n, size = 128, 16 << 10
	owner, slow, ownerDone, followerDone := slowFollower(t, b.guard, n, size)
	require.Equal(t, idemguard.StatusSucceeded, (<-ownerDone).Status)
	close(slow.gate)
	require.Equal(t, idemguard.StatusSucceeded, (<-followerDone).Status)
	_, want := owner.got()
	_, got := slow.got()
	require.Equal(t, want, got)
}

// getSignal counts the reads of one guard's store.
type getSignal struct {
	store.Store
	gets atomic.Int32
}

func (s *getSignal) Get(ctx context.Context, tenant, scope, keyHash string) (store.Record, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, tenant, scope, keyHash)
}

// steppedOp emits prefix1..prefix3 at once, waits for release (ignoring its
// context, like an operation that outlives its cancellation), then emits
// prefix4 and succeeds.
func steppedOp(prefix string, started chan<- struct{}, release <-chan struct{}) idemguard.StreamOperation {
	return idemguard.StreamOperation{Run: func(ctx context.Context, emit func(idemguard.Chunk)) (any, error) {
		for i := 1; i <= 3; i++ {
			emit(idemguard.Chunk{Data: []byte(fmt.Sprintf("%s%d", prefix, i))})
		}
		close(started)
		<-release
		emit(idemguard.Chunk{Data: []byte(prefix + "4")})
		return map[string]any{"ok": true, "data": map[string]any{"by": prefix}}, nil
	}}
}

// A follower in the process of an owner whose operation outlived its claim
// follows the execution the row names, never the old one: before the fix
// it attached to the old owner's log (attempt 1), relayed A1-A3 and
// finished with attempt 2's stored events from the fourth: A1 A2 A3 B4.
func TestFollowerNeverSplicesTwoExecutions(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 20, 3, 0, 0, 0, time.UTC)}
	ms := memstore.New(memstore.WithClock(clock.Now))
	newGuard := func(st store.Store) *idemguard.Guard {
		cfg := idemguard.Config{Store: st, Secret: secret}
		idemguardtest.SetClock(&cfg, clock.Now)
		g, err := idemguard.New(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
		return g
	}
	pStore := &getSignal{Store: ms}
	p, q := newGuard(pStore), newGuard(ms)
	call := streamed("splice")
	call.Settings.StaleAfter = time.Minute // no heartbeat fires in this test

	aStarted, releaseA := make(chan struct{}), make(chan struct{})
	aDone := streamAsync(t, p, call, steppedOp("A", aStarted, releaseA), newChunks())
	<-aStarted
	clock.Advance(2 * time.Minute) // attempt 1 went silent: stale on the store's clock

	bStarted, releaseB := make(chan struct{}), make(chan struct{})
	bDone := streamAsync(t, q, call, steppedOp("B", bStarted, releaseB), newChunks())
	<-bStarted

	f := newChunks()
	fc := call
	fc.Wait = time.Minute
	before := pStore.gets.Load()
	fDone := streamAsync(t, p, fc, steppedOp("F", make(chan struct{}), nil), f)
	// The follower has read the row and either attached (the defect) or
	// waits for the row (it read it twice).
	eventually(t, func() bool {
		o, _ := f.got()
		return o == idemguard.StreamAttached || pStore.gets.Load() >= before+2
	}, "the follower reads the row")
	close(releaseB)
	bres := <-bDone
	require.Equal(t, idemguard.StatusSucceeded, bres.Status)
	require.Equal(t, 2, bres.Attempt)
	close(releaseA)
	require.True(t, (<-aDone).LostClaim, "attempt 1's answer is not stored")

	res := <-fDone
	_, got := f.got()
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.Equal(t, []string{"B1", "B2", "B3", "B4"}, got, "the follower relays attempt 2 alone")
	require.Equal(t, 2, res.Attempt)
}

// A key completed by a plain call that keeps its own JSON (Call.Keep) and
// asked for again as a stream streams as that document, in one chunk.
// Before the fix the stream got a blank envelope
// ({"ok":false,"stopReason":"",...}) and success.
func TestStoredDocumentStreamsAsTheDocument(t *testing.T) {
	b := setup(t)
	call := streamed("doc")
	call.Keep = sanitize.MustAllowlist("id", "status")
	res, err := b.guard.Do(context.Background(), call, func(context.Context) (any, error) {
		return map[string]any{"id": "ord_1", "status": "paid", "prompt": "secret"}, nil
	})
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"ord_1","status":"paid"}`, string(res.Body))

	for _, keep := range []bool{false, true} { // as the routers' stream asks (no Keep), and with it
		c := streamed("doc")
		if keep {
			c.Keep = call.Keep
		}
		w := newChunks()
		sres, err := b.guard.DoStream(context.Background(), c, bigOp(1, 1, nil), w)
		require.NoError(t, err)
		require.Equal(t, idemguard.StatusSucceeded, sres.Status)
		origin, got := w.got()
		require.Equal(t, idemguard.StreamReplayed, origin)
		require.Equal(t, []string{string(res.Body)}, got, "keep %t", keep)
	}
}

// A DoStream with Keep whose operation emits no chunk sends its document,
// to its own caller and on every replay, never a blank envelope.
func TestKeptStreamWithoutChunksSendsItsDocument(t *testing.T) {
	b := setup(t)
	call := streamed("quiet")
	call.Keep = sanitize.MustAllowlist("id")
	op := idemguard.StreamOperation{Run: func(context.Context, func(idemguard.Chunk)) (any, error) {
		return map[string]any{"id": "ord_2", "model": "m"}, nil
	}}
	for i := range 2 {
		w := newChunks()
		res, err := b.guard.DoStream(context.Background(), call, op, w)
		require.NoError(t, err)
		require.Equal(t, idemguard.StatusSucceeded, res.Status)
		require.Equal(t, i == 1, res.Cached)
		_, got := w.got()
		require.Equal(t, []string{`{"id":"ord_2"}`}, got, "call %d", i)
	}
}

// halfLease is a store whose first claim INSERT lands but reports an
// unknown outcome, and whose read that settles it, once armed, returns the
// row as it was when read after the test lets it go: the claim is then
// settled with half its lease spent, and the renewal before the operation
// finds it taken over.
type halfLease struct {
	store.Store
	armed   atomic.Bool
	reading chan struct{}
	release chan struct{}
}

func (s *halfLease) Claim(ctx context.Context, p store.ClaimParams) (uint64, error) {
	id, err := s.Store.Claim(ctx, p)
	if err == nil && s.armed.Load() {
		return 0, fmt.Errorf("reply lost: %w", store.ErrOutcomeUnknown)
	}
	return id, err
}

func (s *halfLease) Get(ctx context.Context, tenant, scope, keyHash string) (store.Record, error) {
	rec, err := s.Store.Get(ctx, tenant, scope, keyHash)
	if s.armed.CompareAndSwap(true, false) {
		close(s.reading)
		<-s.release
	}
	return rec, err
}

// A streamed call answered through the half-spent-lease path (its claim
// settled late, then taken over and completed by another stream) gets the
// stored chunks, not the envelope rendered as one chunk, as it did before
// the fix.
func TestStreamAnsweredAfterALateSettledClaimGetsTheStoredChunks(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 11, 20, 3, 0, 0, 0, time.UTC)}
	ms := memstore.New(memstore.WithClock(clock.Now))
	hl := &halfLease{Store: ms, reading: make(chan struct{}), release: make(chan struct{})}
	hl.armed.Store(true)
	newGuard := func(st store.Store) *idemguard.Guard {
		cfg := idemguard.Config{Store: st, Secret: secret, StoreTimeout: time.Minute}
		idemguardtest.SetClock(&cfg, clock.Now)
		g, err := idemguard.New(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
		return g
	}
	p, q := newGuard(hl), newGuard(ms)
	call := streamed("late")
	call.Settings.StaleAfter = idemguard.MinStaleAfter
	sent := time.Now()
	w := newChunks()
	pDone := streamAsync(t, p, call, steppedOp("P", make(chan struct{}), nil), w)
	<-hl.reading // P's claim landed; its settling read holds the row as it was
	clock.Advance(time.Minute)
	qStarted, releaseQ := make(chan struct{}), make(chan struct{})
	close(releaseQ)
	res, err := q.DoStream(context.Background(), call, steppedOp("Q", qStarted, releaseQ), newChunks())
	require.NoError(t, err)
	require.Equal(t, 2, res.Attempt, "Q took the stale claim over")
	// own renews a claim settled after half its lease (on the local clock).
	eventually(t, func() bool { return time.Since(sent) > idemguard.MinStaleAfter }, "half the lease passes")
	close(hl.release)
	pres := <-pDone
	require.Equal(t, idemguard.StatusSucceeded, pres.Status)
	require.True(t, pres.Cached)
	_, got := w.got()
	require.Equal(t, []string{"Q1", "Q2", "Q3", "Q4"}, got)
}
