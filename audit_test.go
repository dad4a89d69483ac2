package idemguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/testkeys"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
)

// auditSink collects the audit records Config.Observe receives (EventAudit).
type auditSink struct {
	mu     sync.Mutex
	events []store.AuditEvent
}

func (s *auditSink) observe(e idemguard.Event) {
	if e.Kind != idemguard.EventAudit {
		return
	}
	s.mu.Lock()
	s.events = append(s.events, *e.Audit)
	s.mu.Unlock()
}

func (s *auditSink) all() []store.AuditEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]store.AuditEvent(nil), s.events...)
}

func kindsOf(events []store.AuditEvent) []store.AuditKind {
	out := make([]store.AuditKind, len(events))
	for i, e := range events {
		out[i] = e.Kind
	}
	return out
}

func auditing(sink *auditSink) func(*idemguard.Config) {
	return func(c *idemguard.Config) {
		c.Observe = sink.observe
		c.Audit = idemguard.AuditConfig{Observe: true, Store: true, FlushEvery: time.Millisecond}
	}
}

// closeAndCheck closes the Guard (writing the queued batch) and checks that
// the store's trail holds exactly the events the observer saw: each
// durable one by its ID, the tallied ones counted (a tally's ID is its
// first event's); it returns them in the order observed.
func closeAndCheck(t *testing.T, b *testBundle, sink *auditSink) []store.AuditEvent {
	t.Helper()
	require.NoError(t, b.guard.Close(context.Background()))
	seen, stored := sink.all(), b.st.AuditEvents()
	var seenDurable, storedDurable []string
	var seenTallied, counted int64
	seenIDs := map[string]bool{}
	for _, e := range seen {
		seenIDs[e.ID] = true
		if e.Kind.Tallied() {
			seenTallied++
		} else {
			seenDurable = append(seenDurable, e.ID)
		}
	}
	for _, e := range stored {
		require.True(t, seenIDs[e.ID], "the store holds %s %s, which the observer never saw", e.Kind, e.ID)
		if e.Kind.Tallied() {
			counted += e.Count
		} else {
			storedDurable = append(storedDurable, e.ID)
		}
	}
	require.ElementsMatch(t, seenDurable, storedDurable, "the store and the observer hold the same durable events")
	require.Equal(t, seenTallied, counted, "the store counts every read-only decision the observer saw")
	return seen
}

func ofKey(events []store.AuditEvent, keyHash string) []store.AuditEvent {
	var out []store.AuditEvent
	for _, e := range events {
		if e.KeyHash == keyHash {
			out = append(out, e)
		}
	}
	return out
}

func idsOf(events []store.AuditEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = string(e.Kind) + "/" + e.ID
	}
	return out
}

func TestAuditRecordsEachDecisionOnce(t *testing.T) {
	sink := &auditSink{}
	b := setup(t, auditing(sink))
	ctx := idemguard.WithActor(context.Background(), "key:billing")
	var runs atomic.Int32
	call := idemguard.Call{Tenant: "acme", Scope: "ai.copy", ClientKey: "k-1", Inputs: map[string]any{"n": 1}}

	first, err := b.guard.Do(ctx, call, okOp(&runs))
	require.NoError(t, err)
	_, err = b.guard.Do(ctx, call, okOp(&runs)) // replay (cache)
	require.NoError(t, err)
	other := call
	other.Inputs = map[string]any{"n": 2}
	_, err = b.guard.Do(ctx, other, okOp(&runs))
	require.ErrorIs(t, err, idemguard.ErrFingerprintMismatch)

	events := closeAndCheck(t, b, sink)
	require.Equal(t, []store.AuditKind{store.AuditClaimed, store.AuditReplay, store.AuditConflict}, kindsOf(events))
	for _, e := range events {
		require.Equal(t, "acme", e.Tenant)
		require.Equal(t, "ai.copy", e.Scope)
		require.Equal(t, first.KeyHash, e.KeyHash)
		require.Equal(t, 1, e.Attempt)
		require.Equal(t, "key:billing", e.Actor)
		require.Len(t, e.ID, 32)
	}
	require.True(t, events[1].OriginalAt.Equal(first.CompletedAt), "a replay names the original's completion time")

	history, err := b.guard.History(context.Background(), testkeys.Hash(t, b.guard, "acme", "ai.copy", first.KeyHash))
	require.NoError(t, err)
	require.Equal(t, kindsOf(events), kindsOf(history))
	require.Equal(t, 1, history[1].Replay, "History numbers the replays")
	none, err := b.guard.History(context.Background(), testkeys.Hash(t, b.guard, "other", "ai.copy", first.KeyHash))
	require.NoError(t, err)
	require.Empty(t, none, "another tenant's key has no history")
}

func TestAuditTakeoverAbandonAndRetry(t *testing.T) {
	sink := &auditSink{}
	b := setup(t, auditing(sink))
	ctx := context.Background()
	stale := idemguard.Settings{StaleAfter: time.Second, MaxAttempts: 3}
	call := idemguard.Call{Tenant: "acme", Scope: "ai.copy", ClientKey: "k-2", Inputs: 1, Settings: stale}
	hash := testkeys.Client(t, b.guard, "acme", "ai.copy", "k-2").Hash()

	// A claim whose owner died: its row stays started and goes stale.
	id, err := b.st.Claim(ctx, store.ClaimParams{Tenant: "acme", Scope: "ai.copy", KeyHash: hash,
		Fingerprint: fingerprintOf(t, b, call), Nonce: "dead", TTL: time.Hour, Lease: time.Second})
	require.NoError(t, err)
	require.NotZero(t, id)
	b.clock.Advance(2 * time.Second)
	failing := func(context.Context) (any, error) { return nil, &idemguard.OpError{Reason: sanitize.ProviderError} }
	res, err := b.guard.Do(ctx, call, failing)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusFailed, res.Status)
	var runs atomic.Int32
	_, err = b.guard.Do(ctx, call, okOp(&runs))
	require.NoError(t, err)

	events := ofKey(closeAndCheck(t, b, sink), hash)
	require.Equal(t, []store.AuditKind{store.AuditTakeover, store.AuditRetried}, kindsOf(events))
	require.Equal(t, 2, events[0].Attempt)
	require.Equal(t, 3, events[1].Attempt)
	require.True(t, events[0].At.Equal(b.clock.Now()), "a takeover carries the store's clock at the read it came from")
}

func TestAuditAbandonedUnderPolicyFail(t *testing.T) {
	sink := &auditSink{}
	b := setup(t, auditing(sink))
	ctx := context.Background()
	call := idemguard.Call{Tenant: "acme", Scope: "ai.bill", ClientKey: "k-3", Inputs: 1,
		Settings: idemguard.Settings{StaleAfter: time.Second, StalePolicy: idemguard.StaleFail}}
	hash := testkeys.Client(t, b.guard, "acme", "ai.bill", "k-3").Hash()
	_, err := b.st.Claim(ctx, store.ClaimParams{Tenant: "acme", Scope: "ai.bill", KeyHash: hash,
		Fingerprint: fingerprintOf(t, b, call), Nonce: "dead", TTL: time.Hour, Lease: time.Second})
	require.NoError(t, err)
	b.clock.Advance(2 * time.Second)
	var runs atomic.Int32
	res, err := b.guard.Do(ctx, call, okOp(&runs))
	require.NoError(t, err)
	require.Equal(t, sanitize.Abandoned, res.StopReason)
	require.Zero(t, runs.Load())

	events := ofKey(closeAndCheck(t, b, sink), hash)
	require.Equal(t, []store.AuditKind{store.AuditAbandoned, store.AuditReplay}, kindsOf(events))
	require.Equal(t, sanitize.Abandoned, events[0].StopReason)
}

func TestAuditReleasedWhenTheCallerLeftBeforeTheRun(t *testing.T) {
	sink := &auditSink{}
	b := setup(t, auditing(sink))
	ctx, cancel := context.WithCancel(context.Background())
	call := idemguard.Call{Tenant: "acme", Scope: "ai.copy", ClientKey: "k-4", Inputs: 1,
		Check: func() error { cancel(); return nil }} // the caller hangs up just before the claim
	var runs atomic.Int32
	_, err := b.guard.Do(ctx, call, okOp(&runs))
	require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
	require.Zero(t, runs.Load())
	require.Empty(t, b.st.Rows())

	events := closeAndCheck(t, b, sink)
	require.Equal(t, []store.AuditKind{store.AuditClaimed, store.AuditReleased}, kindsOf(events))
}

func TestAuditInProgressAndCancel(t *testing.T) {
	sink := &auditSink{}
	b := setup(t, auditing(sink))
	ctx := context.Background()
	call := idemguard.Call{Tenant: "acme", Scope: "ai.job", ClientKey: "k-5", Inputs: 1}
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := b.guard.Do(ctx, call, func(context.Context) (any, error) {
			close(started)
			<-release
			return nil, nil
		})
		done <- err
	}()
	<-started
	res, err := b.guard.Do(ctx, call, func(context.Context) (any, error) { return nil, errors.New("never runs") })
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusInProgress, res.Status)
	require.NoError(t, b.guard.Cancel(idemguard.WithActor(ctx, "key:ops"), testkeys.Hash(t, b.guard, "acme", "ai.job", res.KeyHash)))
	close(release)
	require.NoError(t, <-done)

	events := closeAndCheck(t, b, sink)
	require.Equal(t, []store.AuditKind{store.AuditClaimed, store.AuditInProgress, store.AuditCanceled}, kindsOf(events))
	require.Equal(t, store.InProgressAnswered, events[1].Detail)
	require.Equal(t, "key:ops", events[2].Actor, "a cancel names who asked for it")
}

// TestAuditNeverHoldsSecrets: the key, the inputs and the answer appear in
// no event, in no form that JSON shows.
func TestAuditNeverHoldsSecrets(t *testing.T) {
	sink := &auditSink{}
	b := setup(t, auditing(sink))
	const key, prompt, answer = "canary-key-7f3a", "canary prompt: my card is 4111", "canary-answer-9c1d"
	call := idemguard.Call{Tenant: "acme", Scope: "ai.copy", ClientKey: key,
		Inputs: map[string]any{"prompt": idemguard.HashUserText(prompt), "raw": prompt}}
	op := func(context.Context) (any, error) {
		return map[string]any{"ok": true, "data": map[string]any{"text": answer}}, nil
	}
	for range 3 {
		_, err := b.guard.Do(context.Background(), call, op)
		require.NoError(t, err)
	}
	events := closeAndCheck(t, b, sink)
	require.Len(t, events, 3)
	for _, e := range events {
		j, err := json.Marshal(e)
		require.NoError(t, err)
		for _, canary := range []string{key, prompt, "4111", answer, e.KeyHash} {
			require.NotContains(t, string(j), canary)
		}
		require.Contains(t, string(j), `"keyPrefix":"`+e.KeyHash[:store.KeyPrefixLen]+`"`)
	}
}

// blockingAudit is a store whose batch writes hang until released.
type blockingAudit struct {
	*memstore.Store
	release chan struct{}
}

func (s blockingAudit) AppendAudit(ctx context.Context, events []store.AuditEvent) error {
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.AppendAudit(ctx, events)
}

// countingDrops returns a Guard on st auditing as audit, and the count of
// the audit decisions it dropped for reason (EventAuditDropped's Field).
func countingDrops(t *testing.T, st store.Store, audit idemguard.AuditConfig, reason string) (*idemguard.Guard, *atomic.Int32) {
	t.Helper()
	dropped := &atomic.Int32{}
	g, err := idemguard.New(idemguard.Config{Store: st, Secret: secret, Audit: audit,
		Observe: func(e idemguard.Event) {
			if e.Kind == idemguard.EventAuditDropped && e.Field == reason {
				dropped.Add(1)
			}
		}})
	require.NoError(t, err)
	return g, dropped
}

// TestAuditDropsBatchedEventsWhenTheQueueIsFull: replays never wait for the
// audit writer; a replay that needs a new count (another actor's) and
// finds no room is dropped and counted.
func TestAuditDropsBatchedEventsWhenTheQueueIsFull(t *testing.T) {
	st := blockingAudit{Store: memstore.New(), release: make(chan struct{})}
	g, dropped := countingDrops(t, st, idemguard.AuditConfig{Store: true, QueueSize: 1, BatchSize: 1, FlushEvery: time.Hour},
		"queue_full")
	call := idemguard.Call{Tenant: "acme", Scope: "ai.copy", ClientKey: "k-6", Inputs: 1}
	var runs atomic.Int32
	for i := range 10 {
		_, err := g.Do(idemguard.WithActor(context.Background(), fmt.Sprintf("key:%d", i)), call, okOp(&runs))
		require.NoError(t, err)
	}
	close(st.release)
	require.NoError(t, g.Close(context.Background()))
	require.EqualValues(t, 1, runs.Load())
	stored := st.AuditEvents()
	// The claim is durable (carried by the row); of 9 replays by 9 actors,
	// one is held by the blocked writer, one waits in the queue, the rest
	// were dropped.
	var replays int64
	for _, e := range stored {
		if e.Kind == store.AuditReplay {
			replays += e.Count
		}
	}
	require.Equal(t, store.AuditClaimed, stored[len(stored)-1].Kind)
	require.EqualValues(t, 9, int64(dropped.Load())+replays)
	require.GreaterOrEqual(t, dropped.Load(), int32(7))
}

// TestAuditWriterWakesWhenTheQueueIsHalfFull: the batch writer sleeps until
// its tick (an hour here) unless the queue is half full; then it writes at
// once, before the queue can overflow.
func TestAuditWriterWakesWhenTheQueueIsHalfFull(t *testing.T) {
	st := memstore.New()
	g, err := idemguard.New(idemguard.Config{Store: st, Secret: secret,
		Audit: idemguard.AuditConfig{Store: true, QueueSize: 4, FlushEvery: time.Hour}})
	require.NoError(t, err)
	defer func() { require.NoError(t, g.Close(context.Background())) }()
	call := idemguard.Call{Tenant: "acme", Scope: "ai.copy", ClientKey: "k-wake", Inputs: 1}
	var runs atomic.Int32
	replays := func() (n int64) {
		for _, e := range st.AuditEvents() {
			if e.Kind == store.AuditReplay {
				n += e.Count
			}
		}
		return n
	}
	// The claim, and replays by one actor: the queue holds one count, a
	// quarter full.
	for range 3 {
		_, err := g.Do(idemguard.WithActor(context.Background(), "key:a"), call, okOp(&runs))
		require.NoError(t, err)
	}
	_, err = g.Do(idemguard.WithActor(context.Background(), "key:b"), call, okOp(&runs)) // half full
	require.NoError(t, err)
	require.Eventually(t, func() bool { return replays() == 3 }, 5*time.Second, time.Millisecond)
}

// failingAudit is a store that refuses every audit batch.
type failingAudit struct{ *memstore.Store }

func (failingAudit) AppendAudit(context.Context, []store.AuditEvent) error {
	return errors.New("audit table unavailable")
}

// TestAuditCountsEveryDecisionOfARefusedBatch: a batch the store refuses
// is dropped, and each decision its counts held is counted lost, as
// metrics count them: a storm of replays of one key in one window is one
// count for the store, and as many drops as replays when it is lost.
func TestAuditCountsEveryDecisionOfARefusedBatch(t *testing.T) {
	g, dropped := countingDrops(t, failingAudit{memstore.New()}, idemguard.AuditConfig{Store: true, FlushEvery: time.Hour},
		"store")
	call := idemguard.Call{Tenant: "acme", Scope: "ai.copy", ClientKey: "k-lost", Inputs: 1}
	var runs atomic.Int32
	for range 26 { // the claim, then 25 replays
		_, err := g.Do(context.Background(), call, okOp(&runs))
		require.NoError(t, err)
	}
	require.NoError(t, g.Close(context.Background()))
	require.EqualValues(t, 25, dropped.Load())
}

// recordingAudit is a store that keeps every batch AppendAudit got.
type recordingAudit struct {
	*memstore.Store
	mu      sync.Mutex
	batches [][]store.AuditEvent
}

func (s *recordingAudit) AppendAudit(ctx context.Context, events []store.AuditEvent) error {
	s.mu.Lock()
	s.batches = append(s.batches, slices.Clone(events))
	s.mu.Unlock()
	return s.Store.AppendAudit(ctx, events)
}

// TestAuditCountsReplaysBeforeTheStore: a storm of replays of one key in
// one flush window reaches the store as one count per actor, not one event
// per replay, while the observer still sees each replay; the stored
// count's ID is its first replay's, and the history tells each actor's
// count, first and last time. Queuing one event per replay hands the
// store all of them.
func TestAuditCountsReplaysBeforeTheStore(t *testing.T) {
	sink := &auditSink{}
	var st *recordingAudit
	b := setup(t, auditing(sink), func(c *idemguard.Config) {
		st = &recordingAudit{Store: c.Store.(*memstore.Store)}
		c.Store, c.Audit.FlushEvery = st, time.Hour
	})
	g, clock := b.guard, b.clock
	call := idemguard.Call{Tenant: "acme", Scope: "ai.copy", ClientKey: "k-storm", Inputs: 1}
	var runs atomic.Int32
	const n = 300
	for i := range n + 1 { // the claim, then n replays: two of three by key:a
		actor := "key:a"
		if i%3 == 2 {
			actor = "key:b"
		}
		clock.Advance(time.Millisecond)
		_, err := g.Do(idemguard.WithActor(context.Background(), actor), call, okOp(&runs))
		require.NoError(t, err)
	}
	require.NoError(t, g.Close(context.Background()))
	require.EqualValues(t, 1, runs.Load())

	seen := sink.all()
	require.Len(t, seen, n+1, "the observer sees every decision")
	require.Len(t, st.batches, 1, "one batch at the flush")
	batch := st.batches[0]
	require.Len(t, batch, 2, "one count per actor")
	require.Equal(t, [2]int64{n / 3 * 2, n / 3}, [2]int64{batch[0].Count, batch[1].Count})
	require.Equal(t, [2]string{seen[1].ID, seen[2].ID}, [2]string{batch[0].ID, batch[1].ID},
		"a count carries its first replay's ID")
	require.Equal(t, [2]time.Time{seen[1].At, seen[2].At}, [2]time.Time{batch[0].At, batch[1].At})
	require.Equal(t, [2]time.Time{seen[n].At, seen[n-1].At}, [2]time.Time{batch[0].LastAt, batch[1].LastAt})

	history, err := g.History(context.Background(), testkeys.Client(t, g, "acme", "ai.copy", "k-storm"))
	require.NoError(t, err)
	require.Equal(t, []store.AuditKind{store.AuditClaimed, store.AuditReplay, store.AuditReplay}, kindsOf(history))
	for i, actor := range []string{"key:a", "key:b"} {
		h := history[i+1]
		require.Equal(t, actor, h.Actor)
		require.Equal(t, batch[i].Count, h.Count)
		require.True(t, h.At.Equal(batch[i].At) && h.LastAt.Equal(batch[i].LastAt), "%s: first and last time", actor)
	}
}

func TestAuditOffWritesNothing(t *testing.T) {
	b := setup(t)
	var runs atomic.Int32
	call := idemguard.Call{Tenant: "acme", Scope: "ai.copy", ClientKey: "k-7", Inputs: 1}
	for range 2 {
		_, err := b.guard.Do(context.Background(), call, okOp(&runs))
		require.NoError(t, err)
	}
	require.Empty(t, b.st.AuditEvents())
}

func TestActorIsValidated(t *testing.T) {
	b := setup(t)
	for _, actor := range []string{strings.Repeat("a", idemguard.MaxActorLen+1), "key:\nforged"} {
		_, err := b.guard.Do(context.Background(), idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1, Actor: actor},
			func(context.Context) (any, error) { return nil, nil })
		require.ErrorIs(t, err, idemguard.ErrInvalidInput)
	}
	require.Empty(t, b.st.Rows())
}

func TestHashActorHidesTheName(t *testing.T) {
	b := setup(t)
	a := b.guard.HashActor("alice@example.com")
	require.Equal(t, a, b.guard.HashActor("alice@example.com"))
	require.NotEqual(t, a, b.guard.HashActor("bob@example.com"))
	require.NotContains(t, a, "alice")
	require.Len(t, a, 2+32)
}

// fingerprintOf is the fingerprint the Guard stores for call's inputs,
// read back from a claim it makes under another key.
func fingerprintOf(t *testing.T, b *testBundle, call idemguard.Call) string {
	t.Helper()
	probe := call
	probe.ClientKey += "-probe"
	probe.Settings = idemguard.Settings{}
	res, err := b.guard.Do(context.Background(), probe, func(context.Context) (any, error) { return nil, nil })
	require.NoError(t, err)
	for _, r := range b.st.Rows() {
		if r.KeyHash == res.KeyHash {
			return r.Fingerprint
		}
	}
	t.Fatal("probe row not found")
	return ""
}

// TestAuditObserverWithoutStore: with Store off, the observer still gets
// every event and the store gets none.
func TestAuditObserverWithoutStore(t *testing.T) {
	sink := &auditSink{}
	b := setup(t, func(c *idemguard.Config) { c.Observe, c.Audit = sink.observe, idemguard.AuditConfig{Observe: true} })
	var runs atomic.Int32
	call := idemguard.Call{Tenant: "acme", Scope: "ai.copy", ClientKey: "k-8", Inputs: 1}
	for range 2 {
		_, err := b.guard.Do(context.Background(), call, okOp(&runs))
		require.NoError(t, err)
	}
	require.NoError(t, b.guard.Close(context.Background()))
	require.Equal(t, []store.AuditKind{store.AuditClaimed, store.AuditReplay}, kindsOf(sink.all()))
	require.Empty(t, b.st.AuditEvents())
}

func TestContextActorIsValidated(t *testing.T) {
	b := setup(t, auditing(&auditSink{}))
	ctx := idemguard.WithActor(context.Background(), strings.Repeat("a", idemguard.MaxActorLen+1))
	_, err := b.guard.Do(ctx, idemguard.Call{Tenant: "acme", Scope: "s", Inputs: 1},
		func(context.Context) (any, error) { return nil, nil })
	require.ErrorIs(t, err, idemguard.ErrInvalidInput)
	require.ErrorIs(t, b.guard.Cancel(ctx, testkeys.Hash(t, b.guard, "acme", "s", strings.Repeat("0", 64))), idemguard.ErrInvalidInput)
	require.Empty(t, b.st.Rows())
}

// TestAuditObservedRecordsAreTheObserversToKeep: an observer may keep the
// record it is handed (Event.Audit) as long as it likes. A replay's record
// and its ID's bytes are made in one allocation (observedAudit): no later
// decision, on any goroutine, may change a kept record or its ID, and
// every ID is its own.
func TestAuditObservedRecordsAreTheObserversToKeep(t *testing.T) {
	var mu sync.Mutex
	var kept []*store.AuditEvent
	var copies []store.AuditEvent
	keep := func(e idemguard.Event) {
		if e.Kind == idemguard.EventAudit {
			c := *e.Audit
			c.ID = strings.Clone(c.ID) // its own bytes, to compare the kept one's with
			mu.Lock()
			kept, copies = append(kept, e.Audit), append(copies, c)
			mu.Unlock()
		}
	}
	b := setup(t, func(c *idemguard.Config) {
		c.Observe, c.Audit = keep, idemguard.AuditConfig{Observe: true, Store: true, FlushEvery: time.Millisecond}
	})
	var runs atomic.Int32
	calls := []idemguard.Call{{Tenant: "acme", Scope: "ai.copy", ClientKey: "k-a", Inputs: 1},
		{Tenant: "acme", Scope: "ai.copy", ClientKey: "k-b", Inputs: 2}}
	// Each key's one execution first: a call that found it still running
	// would be answered in progress, not replayed.
	for _, c := range calls {
		_, err := b.guard.Do(context.Background(), c, okOp(&runs))
		require.NoError(t, err)
	}
	mu.Lock()
	first := len(kept)
	mu.Unlock()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 100 {
				res, err := b.guard.Do(context.Background(), calls[(w+i)%2], okOp(&runs))
				assert.NoError(t, err)
				assert.True(t, res.Cached, "a replay")
			}
		})
	}
	wg.Wait()
	require.NoError(t, b.guard.Close(context.Background()))
	require.EqualValues(t, 2, runs.Load())
	require.Len(t, kept, first+400, "one record a replay")
	ids := map[string]bool{}
	for i, rec := range kept {
		require.Equal(t, copies[i], *rec, "a kept record is as it was observed")
		require.Regexp(t, `^[0-9a-f]{32}$`, rec.ID)
		require.False(t, ids[rec.ID], "id %s observed twice", rec.ID)
		ids[rec.ID] = true
	}
	for _, e := range b.st.AuditEvents() {
		require.True(t, ids[e.ID], "the store's %s %s is an observed id", e.Kind, e.ID)
	}
}
