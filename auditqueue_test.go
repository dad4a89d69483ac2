package idemguard

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/store"
)

// One tenant's storm fills at most half of the audit queue: another
// tenant's events still find room, and batches take the tenants in turn.
// With one queue for all (a channel), the storm took every place and the
// quiet tenant's events were dropped.
func TestAuditQueueIsFairBetweenTenants(t *testing.T) {
	t.Parallel()
	q := newAuditQueue(10)
	ev := func(tenant string, attempt int) store.AuditEvent {
		return store.AuditEvent{Tenant: tenant, Kind: store.AuditReplay, Attempt: attempt}
	}
	accepted := 0
	for i := range 100 {
		if q.push(ev("loud", i)) {
			accepted++
		}
	}
	require.Equal(t, 5, accepted, "the storm fills half of the queue")
	for i := range 3 {
		require.True(t, q.push(ev("quiet", i)), "quiet's event %d was dropped", i)
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
		"each tenant's events in order")
	require.Empty(t, q.take(nil, 100))
	require.True(t, q.push(ev("loud", 100)), "taken events free their places")
}

// A steady stream of one tenant's events, taken as they come, reuses the
// queue's arrays: nothing is allocated per event once they have grown.
func TestAuditQueueReusesItsArrays(t *testing.T) {
	q := newAuditQueue(64)
	e := store.AuditEvent{Tenant: "acme", Kind: store.AuditReplay}
	var batch []store.AuditEvent
	taken := 0
	cycle := func() {
		for range 20 {
			require.True(t, q.push(e))
		}
		batch = q.take(batch[:0], 8) // a partial take: the queue keeps events ahead of its head
		taken += len(batch)
		for range 8 {
			require.True(t, q.push(e))
		}
		batch = q.take(batch[:0], 100)
		taken += len(batch)
	}
	cycle()
	require.Zero(t, testing.AllocsPerRun(100, cycle))
	require.Equal(t, 28*102, taken, "every event pushed was taken") // AllocsPerRun runs it once more to warm up
}
