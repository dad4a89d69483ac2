package idemguard

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/store"
)

// One tenant's storm over many keys fills at most half of the audit queue:
// another tenant's decisions still find room, and batches take the tenants
// in turn. With one queue for all (a channel), the storm took every place
// and the quiet tenant's events were dropped.
func TestAuditQueueIsFairBetweenTenants(t *testing.T) {
	t.Parallel()
	q := newAuditQueue(10)
	ev := func(tenant string, attempt int) *store.AuditEvent {
		return &store.AuditEvent{Tenant: tenant, Kind: store.AuditReplay, Attempt: attempt} // a tally per attempt
	}
	accepted := 0
	for i := range 100 {
		if q.add(ev("loud", i)) {
			accepted++
		}
	}
	require.Equal(t, 5, accepted, "the storm fills half of the queue")
	require.True(t, q.add(ev("loud", 4)), "a decision whose tally is queued is counted, full or not")
	for i := range 3 {
		require.True(t, q.add(ev("quiet", i)), "quiet's event %d was dropped", i)
	}

	batch := q.take(nil, 4)
	tenants := []string{}
	for _, e := range batch {
		tenants = append(tenants, e.Tenant)
	}
	require.Equal(t, []string{"loud", "quiet", "loud", "quiet"}, tenants, "batches take the tenants in turn")
	rest := q.take(nil, 100)
	require.Len(t, rest, 4)
	require.Equal(t, []int{2, 2, 3, 4}, []int{rest[0].Attempt, rest[1].Attempt, rest[2].Attempt, rest[3].Attempt},
		"each tenant's tallies in order")
	require.Equal(t, []int64{1, 1, 1, 2}, []int64{rest[0].Count, rest[1].Count, rest[2].Count, rest[3].Count})
	require.Empty(t, q.take(nil, 100))
	require.True(t, q.add(ev("loud", 100)), "taken tallies free their places")
}

// N decisions of one key and actor in one flush window reach the writer as
// one tally of N: the first's ID, time and OriginalAt, the last's time.
// Another actor, kind or attempt is another tally; a decision after the
// writer took the tally starts a new one. A queue of one event per
// decision hands the writer N events.
func TestAuditQueueCountsDecisionsPerKeyAndActor(t *testing.T) {
	t.Parallel()
	q := newAuditQueue(100)
	base := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ev := func(actor string, at time.Duration, id string) *store.AuditEvent {
		return &store.AuditEvent{ID: id, Kind: store.AuditReplay, At: base.Add(at), Tenant: "acme", Scope: "s",
			KeyHash: "kh", Attempt: 1, Actor: actor, OriginalAt: base.Add(at - time.Hour)}
	}
	const n = 1000
	for i := range n {
		require.True(t, q.add(ev("key:a", time.Duration(i+1)*time.Millisecond, "")))
	}
	require.True(t, q.add(ev("key:a", 0, "earliest")), "a decision dated before the tally's first (another clock)")
	require.True(t, q.add(ev("key:b", time.Second, "b1")))
	require.True(t, q.add(ev("key:b", 2*time.Second, "b2")))

	batch := q.take(nil, 100)
	require.Len(t, batch, 2, "one tally per actor, not one event per decision")
	a, b := batch[0], batch[1]
	require.EqualValues(t, n+1, a.Count)
	require.Equal(t, "earliest", a.ID)
	require.Equal(t, base, a.At)
	require.Equal(t, base.Add(-time.Hour), a.OriginalAt)
	require.Equal(t, base.Add(n*time.Millisecond), a.LastAt)
	require.Equal(t, store.AuditEvent{ID: "b1", Kind: store.AuditReplay, At: base.Add(time.Second), Tenant: "acme",
		Scope: "s", KeyHash: "kh", Attempt: 1, Actor: "key:b", OriginalAt: base.Add(time.Second - time.Hour),
		Count: 2, LastAt: base.Add(2 * time.Second)}, b)

	require.True(t, q.add(ev("key:a", 3*time.Second, "")))
	next := q.take(nil, 100)
	require.Len(t, next, 1)
	require.EqualValues(t, 1, next[0].Count, "a taken tally is not counted again")
	require.Len(t, next[0].ID, 32, "a tally without its decision's ID gets one")

	// Key hashes alike in the characters that place them (bucketOf) are
	// still two keys.
	h1, h2 := strings.Repeat("a", 16)+"1", strings.Repeat("a", 16)+"2"
	require.Equal(t, bucketOf(h1), bucketOf(h2))
	for _, h := range []string{h1, h2, h1, h2, h1} {
		e := ev("key:a", time.Second, "")
		e.KeyHash = h
		require.True(t, q.add(e))
	}
	both := q.take(nil, 100)
	require.Len(t, both, 2)
	require.Equal(t, [2]string{h1, h2}, [2]string{both[0].KeyHash, both[1].KeyHash})
	require.Equal(t, [2]int64{3, 2}, [2]int64{both[0].Count, both[1].Count})
}

// A steady stream of one tenant's decisions, taken as they come, reuses
// the queue's arrays and map: nothing is allocated per decision once they
// have grown.
func TestAuditQueueReusesItsArrays(t *testing.T) {
	q := newAuditQueue(64)
	events := make([]store.AuditEvent, 20)
	for i := range events {
		events[i] = store.AuditEvent{ID: "id", Tenant: "acme", Kind: store.AuditReplay, Attempt: i}
	}
	var batch []store.AuditEvent
	taken := 0
	cycle := func() {
		for i := range events {
			require.True(t, q.add(&events[i]))
			require.True(t, q.add(&events[i]))
		}
		batch = q.take(batch[:0], 8) // a partial take: the queue keeps tallies ahead of its head
		taken += len(batch)
		for i := range 8 {
			require.True(t, q.add(&events[i]))
		}
		batch = q.take(batch[:0], 100)
		taken += len(batch)
	}
	cycle()
	require.Zero(t, testing.AllocsPerRun(100, cycle))
	require.Equal(t, 28*102, taken, "every tally made was taken") // AllocsPerRun runs it once more to warm up
}

// Decisions added from many goroutines while the writer takes tallies are
// each counted once: the counts taken add up to the decisions added, none
// lost between a tally's taking and the next decision of its key.
func TestAuditQueueCountsConcurrentDecisionsOnce(t *testing.T) {
	t.Parallel()
	q := newAuditQueue(1000)
	const workers, each = 8, 2000
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				e := store.AuditEvent{Kind: store.AuditReplay, Tenant: []string{"acme", "globex"}[w%2], Scope: "s",
					KeyHash: strconv.Itoa(i % 7), Attempt: 1, Actor: strconv.Itoa(w % 3)}
				require.True(t, q.add(&e))
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	var counted int64
	var batch []store.AuditEvent
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true
		default:
		}
		batch = q.take(batch[:0], 5)
		for _, e := range batch {
			counted += e.Count
		}
	}
	for batch = q.take(batch[:0], 1000); len(batch) > 0; batch = q.take(batch[:0], 1000) {
		for _, e := range batch {
			counted += e.Count
		}
	}
	require.EqualValues(t, workers*each, counted)
}
