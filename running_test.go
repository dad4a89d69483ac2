package idemguard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A started heartbeat arms no renewal timer: the sweep of the running
// operations does, for those still running when it comes. The sweep is
// due within half of every added operation's renewal interval, an
// earlier one replacing a later one (an operation of a scope with a short
// lease added while only long ones run), and marks itself done before it
// reads the list, so that the next operation added makes the next sweep.
func TestRenewalTimersAreArmedByTheSweep(t *testing.T) {
	g := newTestGuard(t, Config{})
	var r runningOps
	newHB := func(every time.Duration) *heartbeat {
		p := prepared{settings: Settings{StaleAfter: 3 * every}}
		hb := g.startHeartbeat(p, owned{leaseFrom: time.Now()}, func(error) {})
		t.Cleanup(hb.stop)
		return hb
	}
	armed := func(hb *heartbeat) bool {
		hb.mu.Lock()
		defer hb.mu.Unlock()
		return hb.timer != nil
	}

	long := newHB(time.Hour)
	require.False(t, armed(long), "a started heartbeat arms its renewal timer itself")
	r.add(long)
	require.False(t, r.sweepAt.After(long.start.Add(30*time.Minute)), "no sweep due within half the interval")
	short := newHB(time.Minute)
	r.add(short)
	require.False(t, r.sweepAt.After(short.start.Add(30*time.Second)), "a shorter interval did not bring the sweep forward")
	require.False(t, armed(long) || armed(short))

	r.sweep()
	require.True(t, armed(long) && armed(short), "the sweep left a running operation without a renewal timer")
	require.True(t, r.sweepAt.IsZero())
	later := newHB(time.Hour)
	r.add(later)
	require.False(t, r.sweepAt.IsZero(), "an operation added after a sweep made none due")

	// Close: no sweep comes any more, and an operation cancelled by it may
	// still run and commit under its lease.
	r.cancelAll()
	require.True(t, armed(later), "an operation running at Close was left without a renewal timer")
	afterClose := newHB(time.Hour)
	r.add(afterClose)
	require.True(t, armed(afterClose), "an operation added after Close was left without a renewal timer")
}
