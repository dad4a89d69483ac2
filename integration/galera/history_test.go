package galera_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/sim"
	"github.com/idemguard/idemguard/store/memstore"
)

// recording writes a test's history the way internal/sim does: every statement each node's
// store ran (sim.Recorder under each Guard), every execution of the operation, every answer;
// check then holds it to the same invariants as the simulation.
type recording struct {
	h    *sim.History
	next atomic.Int64
}

func newRecording() *recording { return &recording{h: sim.NewHistory()} }

// wrap records the statements of a Guard's store.
func (r *recording) wrap(cfg *idemguard.Config) { cfg.Store = sim.NewRecorder(cfg.Store, r.h) }

// key names c's row as the history does, and registers the settings it runs with (the
// defaults).
func (r *recording) key(c idemguard.Call) string {
	k := sim.KeyOf(string(c.Tenant), c.Scope, sim.KeyHash(secret, string(c.Tenant), c.Scope, c.ClientKey, c.Inputs))
	r.h.SetKey(k, sim.KeySpec{Lease: idemguard.DefaultStaleAfter, MaxAttempts: idemguard.DefaultMaxAttempts,
		Policy: idemguard.StaleTakeover})
	return k
}

// do is g.Do, recorded as call of replica node.
func (r *recording) do(ctx context.Context, g *idemguard.Guard, node int, c idemguard.Call, op idemguard.Operation) (idemguard.Result, error) {
	id := int(r.next.Add(1))
	key := r.key(c)
	a := r.h.Begin(id, key, node, false)
	res, err := g.Do(sim.WithCall(ctx, id), c, r.op(key, id, node, op, nil))
	r.h.Finish(a, res, err)
	return res, err
}

// op records op's executions; started, if set, gets each one as it starts.
func (r *recording) op(key string, id, node int, op idemguard.Operation, started func(*sim.Execution)) idemguard.Operation {
	return func(ctx context.Context) (any, error) {
		e := r.h.StartExec(key, id, node)
		if started != nil {
			started(e)
		}
		v, err := op(ctx)
		body, _ := v.(map[string]any)
		r.h.EndExec(e, time.Now(), err != nil, ctx.Err() != nil, body)
		return v, err
	}
}

// check fails the test on any violation of the guard's promises in the history, and reports
// whether the statements were linearizable (see docs/SCALING.md for why that is reported,
// not required, on Galera).
func (r *recording) check(t *testing.T, setting string) {
	t.Helper()
	ops, execs, answers := r.h.Counts()
	if v := sim.Check(r.h); len(v) > 0 {
		var b strings.Builder
		for i, x := range v {
			if i == 20 {
				break
			}
			b.WriteString("\n  " + x.String())
		}
		t.Fatalf("wsrep_sync_wait=%s: %d violations in a history of %d statements, %d executions, %d answers:%s",
			setting, len(v), ops, execs, answers, b.String())
	}
	lin := sim.CheckLinearizable(r.h, 10*time.Second)
	msg := map[porcupine.CheckResult]string{
		porcupine.Ok:      "linearizable",
		porcupine.Illegal: "NOT linearizable (a read saw a row older than a write that had returned, or a write was lost)",
		porcupine.Unknown: "not decided within 10s",
	}[lin.Result]
	t.Logf("wsrep_sync_wait=%s: history checked: %d statements, %d executions, %d answers, 0 violations; the statements are %s",
		setting, ops, execs, answers, msg)
}

// TestRecordingWithoutACluster runs the storm's recording and check over one MemoryStore
// shared by three Guards, so the helpers above are exercised where no cluster is configured.
func TestRecordingWithoutACluster(t *testing.T) {
	store := memstore.New()
	rec := newRecording()
	var guards []*idemguard.Guard
	for range 3 {
		cfg := idemguard.Config{Store: store, Secret: secret, ReplayCacheSize: -1, Logger: slog.New(slog.DiscardHandler)}
		rec.wrap(&cfg)
		g, err := idemguard.New(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
		guards = append(guards, g)
	}
	var runs atomic.Int32
	op := func(context.Context) (any, error) {
		runs.Add(1)
		time.Sleep(10 * time.Millisecond)
		return map[string]any{"ok": true, "traceId": "memory"}, nil
	}
	_, errs := storm(t, rec, guards, 30, call("memory"), op)
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, runs.Load())
	rec.check(t, "none (one MemoryStore)")
	_, execs, answers := rec.h.Counts()
	require.Equal(t, 1, execs)
	require.Equal(t, 30, answers)
}
