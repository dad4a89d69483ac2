package idemguard_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/idemguardtest"
	"github.com/idemguard/idemguard/internal/testkeys"
	"github.com/idemguard/idemguard/progress"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
)

// countingStore counts the statements each store method makes.
type countingStore struct {
	store.Store
	mu sync.Mutex
	n  map[string]int
}

func (c *countingStore) count(m string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[m]++
}

func (c *countingStore) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

func (c *countingStore) Claim(ctx context.Context, p store.ClaimParams) (uint64, error) {
	c.count("Claim")
	return c.Store.Claim(ctx, p)
}

func (c *countingStore) Get(ctx context.Context, tenant, scope, keyHash string) (store.Record, error) {
	c.count("Get")
	return c.Store.Get(ctx, tenant, scope, keyHash)
}

func (c *countingStore) GetMany(ctx context.Context, tenant, scope string, keyHashes []string) ([]store.Record, error) {
	c.count("GetMany")
	return c.Store.GetMany(ctx, tenant, scope, keyHashes)
}

func (c *countingStore) Reclaim(ctx context.Context, p store.ReclaimParams) (bool, error) {
	c.count("Reclaim")
	return c.Store.Reclaim(ctx, p)
}

func (c *countingStore) Abandon(ctx context.Context, p store.AbandonParams) (bool, error) {
	c.count("Abandon")
	return c.Store.Abandon(ctx, p)
}

func (c *countingStore) Heartbeat(ctx context.Context, id uint64, nonce string) (bool, error) {
	c.count("Heartbeat")
	return c.Store.Heartbeat(ctx, id, nonce)
}

func (c *countingStore) Complete(ctx context.Context, p store.CompleteParams) (bool, time.Time, error) {
	c.count("Complete")
	return c.Store.Complete(ctx, p)
}

func (c *countingStore) Release(ctx context.Context, p store.ReleaseParams) (bool, error) {
	c.count("Release")
	return c.Store.Release(ctx, p)
}

func (c *countingStore) Renew(ctx context.Context, p store.RenewParams) (store.RenewResult, error) {
	c.count("Renew")
	return c.Store.Renew(ctx, p)
}

func (c *countingStore) RequestCancel(ctx context.Context, p store.CancelParams) (bool, error) {
	c.count("RequestCancel")
	return c.Store.RequestCancel(ctx, p)
}

func (c *countingStore) AppendAudit(ctx context.Context, events []store.AuditEvent) error {
	c.count("AppendAudit")
	return c.Store.AppendAudit(ctx, events)
}

func (c *countingStore) History(ctx context.Context, tenant, scope string, keyHashes []string, limit int) ([]store.AuditEvent, error) {
	c.count("History")
	return c.Store.History(ctx, tenant, scope, keyHashes, limit)
}

// replica is a Guard over st beating every 10ms, as one replica of a
// service sharing the store.
func replica(t *testing.T, st store.Store, mutate ...func(*idemguard.Config)) *idemguard.Guard {
	t.Helper()
	cfg := idemguard.Config{Store: st, Secret: secret}
	idemguardtest.SetHeartbeatEvery(&cfg, 10*time.Millisecond)
	for _, m := range mutate {
		m(&cfg)
	}
	g, err := idemguard.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
	return g
}

var stepCall = idemguard.Call{Tenant: "acme", Scope: "research", ClientKey: "job-1", Inputs: map[string]any{"q": 1},
	Settings: idemguard.Settings{StaleAfter: time.Second, ProgressStages: []string{"reading", "writing"}}}

// A job reporting 10 steps shows its progress, in order, to a watcher of
// another replica (which only reads the row), and the row holds the last
// one. The operation waits for the watcher to see each step before the
// next, so every step is seen: without the progress in the renewal, the
// watcher sees none and the operation gives up.
func TestProgressRidesTheHeartbeatToAnotherReplica(t *testing.T) {
	st := memstore.New()
	runner, watcher := replica(t, st), replica(t, st)
	seen := make(chan int64, 32)
	op := func(ctx context.Context) (any, error) {
		for i := int64(1); i <= 10; i++ {
			stage := "reading"
			if i > 5 {
				stage = "writing"
			}
			progress.Report(ctx, progress.Update{Done: i, Total: 10, Stage: stage})
			if err := awaitStep(ctx, seen, i); err != nil {
				return nil, err
			}
		}
		return map[string]any{"ok": true, "data": map[string]any{"n": 1}}, nil
	}
	res, err := runner.Start(context.Background(), stepCall, op)
	require.NoError(t, err)
	require.True(t, res.Accepted)

	key := testkeys.Client(t, watcher, "acme", "research", "job-1")
	w, err := watcher.Watch(context.Background(), key, "")
	require.NoError(t, err)
	defer w.Close()
	var got []store.Progress
	var kinds []idemguard.EventKind
	for {
		e, err := w.Next(context.Background())
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		kinds = append(kinds, e.Kind)
		if e.Kind == idemguard.EventProgress {
			pr := *e.Info.Progress
			got = append(got, pr)
			seen <- pr.Done
		}
	}
	require.Len(t, got, 10, "every step, once: %v", kinds)
	for i, pr := range got {
		require.Equal(t, int64(i+1), pr.Done)
		require.Equal(t, int64(10), pr.Total)
		require.Equal(t, map[bool]string{true: "reading", false: "writing"}[i < 5], pr.Stage)
	}
	require.Equal(t, idemguard.EventSucceeded, kinds[len(kinds)-1])
	info, err := watcher.Lookup(context.Background(), key)
	require.NoError(t, err)
	require.NotNil(t, info.Progress)
	require.Equal(t, [3]any{int64(10), int64(10), "writing"}, [3]any{info.Progress.Done, info.Progress.Total, info.Progress.Stage})
}

// awaitStep waits until the watcher saw step i (or 10s pass).
func awaitStep(ctx context.Context, seen <-chan int64, i int64) error {
	timeout := time.After(10 * time.Second)
	for {
		select {
		case d := <-seen:
			if d >= i {
				return nil
			}
		case <-timeout:
			return fmt.Errorf("step %d was never seen", i)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Reports cost no statement: a job that reports on every step makes the
// same store calls as one that reports nothing. Each step waits for a
// renewal, so both runs beat the same number of times.
func TestProgressAddsNoStoreStatement(t *testing.T) {
	run := func(report bool) map[string]int {
		cs := &countingStore{Store: memstore.New(), n: map[string]int{}}
		g := replica(t, cs)
		op := func(ctx context.Context) (any, error) {
			for i := int64(1); i <= 5; i++ {
				if report {
					for j := range int64(50) { // however often it reports
						progress.Report(ctx, progress.Update{Done: i*100 + j, Total: 1000, Stage: "reading"})
					}
				}
				for deadline := time.Now().Add(10 * time.Second); cs.counts()["Renew"] < int(i); {
					if time.Now().After(deadline) {
						return nil, fmt.Errorf("renewal %d never came", i)
					}
					time.Sleep(time.Millisecond) // a poll with a deadline
				}
			}
			return map[string]any{"ok": true}, nil
		}
		_, err := g.Start(context.Background(), stepCall, op)
		require.NoError(t, err)
		require.NoError(t, g.WaitJobs(context.Background()))
		info, err := g.Lookup(context.Background(), testkeys.Client(t, g, "acme", "research", "job-1"))
		require.NoError(t, err)
		require.Equal(t, report, info.Progress != nil)
		return cs.counts()
	}
	without, with := run(false), run(true)
	// The op returns once it has seen its fifth renewal; a sixth may come
	// before the completion (the replica's renewal interval is short),
	// in either run. A report costing a statement would add 250.
	for _, counts := range []map[string]int{without, with} {
		require.GreaterOrEqual(t, counts["Renew"], 5)
		require.LessOrEqual(t, counts["Renew"], 6, "a report costs a renewal")
	}
	delete(without, "Renew")
	delete(with, "Renew")
	require.Equal(t, without, with)
}

// Canary: a stage outside the scope's allowlist, and a report carrying
// text, never reach the row, a log line or an event; each is counted as a
// dropped field "(progress stage)", and the report's numbers are kept.
func TestProgressStageOutsideTheAllowlistNeverLeaves(t *testing.T) {
	const canary = "CANARY-7f3a"
	var logs bytes.Buffer
	var mu sync.Mutex
	var observed []idemguard.Event
	st := memstore.New()
	g := replica(t, st, func(c *idemguard.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.Observe = func(e idemguard.Event) { mu.Lock(); observed = append(observed, e); mu.Unlock() }
	})
	key := testkeys.Client(t, g, "acme", "research", "job-1")
	op := func(ctx context.Context) (any, error) {
		progress.Report(ctx, progress.Update{Done: 1, Total: 4, Stage: canary})
		progress.Report(ctx, progress.Update{Done: 2, Total: 4, Stage: "The model said: " + canary + " to the user"})
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for {
			info, err := g.Lookup(ctx, key)
			if err == nil && info.Progress != nil && info.Progress.Done == 2 {
				return map[string]any{"ok": true}, nil
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
	}
	_, err := g.Start(context.Background(), stepCall, op)
	require.NoError(t, err)
	events := watchToEnd(t, g, key)
	require.NoError(t, g.WaitJobs(context.Background()))
	rec, err := st.Get(context.Background(), "acme", "research", key.Hash())
	require.NoError(t, err)
	require.Equal(t, store.Progress{Done: 2, Total: 4, At: rec.Progress.At}, rec.Progress, "the numbers are kept, the stage is not")

	mu.Lock()
	defer mu.Unlock()
	dropped := 0
	for _, e := range observed {
		if e.Kind == idemguard.EventDroppedField && e.Field == "(progress stage)" {
			dropped++
		}
	}
	require.Equal(t, 2, dropped, "each dropped stage is counted")
	for what, text := range map[string]string{"row": fmt.Sprintf("%+v", rec), "log": logs.String(),
		"observed": fmt.Sprintf("%+v", observed), "watched": fmt.Sprintf("%+v", events)} {
		require.False(t, strings.Contains(text, canary), "the canary reached the %s", what)
	}
	require.Contains(t, logs.String(), "(progress stage)", "the drop is logged by its name")
}

// watchToEnd watches key from its first event until the watch ends and
// returns every event it saw.
func watchToEnd(t *testing.T, g *idemguard.Guard, key idemguard.Key) []idemguard.Event {
	t.Helper()
	w, err := g.Watch(context.Background(), key, "")
	require.NoError(t, err)
	defer w.Close()
	var events []idemguard.Event
	for {
		e, err := w.Next(context.Background())
		if err == io.EOF {
			return events
		}
		require.NoError(t, err)
		events = append(events, e)
	}
}
