package idemguard_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/idemguardtest"
	"github.com/idemguard/idemguard/internal/metrics"
)

// A dropped field name longer than the cut, with a multi-byte character
// across the cut, goes through the real metrics: the label must be valid
// UTF-8 (Prometheus panics otherwise) and the result must be stored.
func TestLongNonASCIIDroppedFieldNameIsCountedAndStored(t *testing.T) {
	m := metrics.New()
	var fields []string
	b := setup(t, func(c *idemguard.Config) {
		c.Observe = func(e idemguard.Event) {
			if e.Kind == idemguard.EventDroppedField {
				fields = append(fields, e.Field)
			}
			m.Observe(e)
		}
	})
	name := strings.Repeat("a", 63) + "é"
	bad := "x\xffy" // not UTF-8 at all (a Go map key can be anything)
	var runs atomic.Int32
	op := func(context.Context) (any, error) {
		runs.Add(1)
		return map[string]any{"ok": true, name: 1, bad: 2}, nil
	}
	call := idemguard.Call{Tenant: "t1", Scope: "s.drop", Inputs: map[string]any{"q": 1}}
	res, err := b.guard.Do(context.Background(), call, op)
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	require.Len(t, fields, 2)
	for _, f := range fields {
		require.True(t, utf8.ValidString(f), "%q", f)
	}
	families, err := m.Registry().Gather()
	require.NoError(t, err)
	series := 0
	for _, f := range families {
		if f.GetName() == "idemguard_dropped_fields_total" {
			series = len(f.GetMetric())
		}
	}
	require.Equal(t, 2, series)

	again, err := b.guard.Do(context.Background(), call, op)
	require.NoError(t, err)
	require.True(t, again.Cached, "the result was committed")
	require.EqualValues(t, 1, runs.Load())
}

// An observer that panics never breaks the protocol: the result is
// committed and replayed, and the operation runs once.
func TestPanickingObserverStillCommits(t *testing.T) {
	var calls atomic.Int32
	b := setup(t, func(c *idemguard.Config) {
		c.Observe = func(idemguard.Event) { calls.Add(1); panic("observer bug") }
	})
	var runs atomic.Int32
	call := idemguard.Call{Tenant: "t1", Scope: "s.panic", Inputs: map[string]any{"q": 1}}
	res, err := b.guard.Do(context.Background(), call, okOp(&runs))
	require.NoError(t, err)
	require.Equal(t, idemguard.StatusSucceeded, res.Status)
	again, err := b.guard.Do(context.Background(), call, okOp(&runs))
	require.NoError(t, err)
	require.True(t, again.Cached)
	require.EqualValues(t, 1, runs.Load())
	require.Positive(t, calls.Load())
}

// A background job's replay answered from the replay cache books the
// tokens it saved to the job's tenant, as a replay through Do does: the
// money-saved figures (internal/stats) are summed from these events.
func TestBackgroundJobCachedReplayBooksItsTokensToItsTenant(t *testing.T) {
	var mu sync.Mutex
	var replays []idemguard.Event
	b := setup(t, func(c *idemguard.Config) {
		c.Observe = func(e idemguard.Event) {
			if e.Kind == idemguard.EventReplayed {
				mu.Lock()
				replays = append(replays, e)
				mu.Unlock()
			}
		}
	})
	usage := idemguard.Usage{PromptTokens: 120, CompletionTokens: 30}
	op := func(context.Context) (any, error) {
		return idemguard.Response{Value: map[string]any{"ok": true}, Usage: usage}, nil
	}
	call := idemguard.Call{Tenant: "acme", Scope: "s.job", Inputs: map[string]any{"q": 1}}
	res, err := b.guard.Start(context.Background(), call, op)
	require.NoError(t, err)
	require.True(t, res.Accepted)
	require.Eventually(t, func() bool { return idemguardtest.Jobs(b.guard) == 0 }, 5*time.Second, time.Millisecond)

	again, err := b.guard.Start(context.Background(), call, op)
	require.NoError(t, err)
	require.True(t, again.Cached)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, replays, 1)
	require.True(t, replays[0].FromMemory, "the replay cache answered")
	require.Equal(t, "acme", replays[0].Tenant)
	require.Equal(t, usage, replays[0].Usage)
}
