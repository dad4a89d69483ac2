package idemguard_test

import (
	"context"
	"fmt"
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
	require.Equal(t, 1, series, "one series of the scope: the names are not labels")

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

// One tenant's answers cannot use up the dropped-field names another
// tenant's are logged under, nor mint metric series: an echoing upstream
// that returns 1,000 invented field names to tenant t1 leaves t2's dropped
// field logged under its own name, and the metric holds one series for the
// scope. On the code before, t2's field was counted as "(other)" (a global
// cap of 1,000 names) and the metric held 1,001 series.
func TestDroppedFieldNamesAreBoundedPerTenant(t *testing.T) {
	m := metrics.New()
	var mu sync.Mutex
	byTenant := map[string][]string{}
	b := setup(t, func(c *idemguard.Config) {
		c.Observe = func(e idemguard.Event) {
			if e.Kind == idemguard.EventDroppedField {
				mu.Lock()
				byTenant[e.Tenant] = append(byTenant[e.Tenant], e.Field)
				mu.Unlock()
			}
			m.Observe(e)
		}
	})
	echo := func(names ...string) idemguard.Operation {
		return func(context.Context) (any, error) {
			out := map[string]any{"ok": true}
			for _, n := range names {
				out[n] = 1
			}
			return out, nil
		}
	}
	ctx := context.Background()
	for i := range 10 {
		names := make([]string, 100)
		for j := range names {
			names[j] = fmt.Sprintf("minted_%d_%d", i, j)
		}
		_, err := b.guard.Do(ctx, idemguard.Call{Tenant: "t1", Scope: "s.echo", Inputs: i}, echo(names...))
		require.NoError(t, err)
	}
	_, err := b.guard.Do(ctx, idemguard.Call{Tenant: "t2", Scope: "s.echo", Inputs: 0}, echo("legacy_total"))
	require.NoError(t, err)

	mu.Lock()
	require.Equal(t, []string{"legacy_total"}, byTenant["t2"])
	require.Len(t, byTenant["t1"], 1000)
	require.Contains(t, byTenant["t1"], "(other)", "t1's own share ran out")
	mu.Unlock()
	families, err := m.Registry().Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "idemguard_dropped_fields_total" {
			require.Len(t, f.GetMetric(), 1)
			require.EqualValues(t, 1001, f.GetMetric()[0].GetCounter().GetValue())
		}
	}
}
