package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/testdb"
)

// The replay suite's two sides on the real MariaDB, one goroutine, for
// -cpuprofile and -benchmem: a store replay (replay cache off, default
// read-first) against the raw SELECT it must keep up with. The client-side
// CPU and allocations per op are what these add to the round trip; the
// ratio itself comes from `make bench`.

func newReplayEnv(b *testing.B) (*env, []string) {
	b.Helper()
	db := testdb.New(b)
	e := &env{log: slog.New(slog.NewTextHandler(io.Discard, nil)), db: db.DB,
		secret: []byte("bench-secret-0123456789abcdef-0123")}
	hashes, err := populateReplays(context.Background(), e)
	require.NoError(b, err)
	return e, hashes
}

func BenchmarkReplayStoreMySQL(b *testing.B) {
	e, _ := newReplayEnv(b)
	g, err := e.newGuard(func(c *idemguard.Config) { c.ReplayCacheSize = -1 })
	require.NoError(b, err)
	b.Cleanup(func() { closeGuard(g) })
	loopReplays(b, g)
}

func BenchmarkRawSelectMySQL(b *testing.B) {
	e, hashes := newReplayEnv(b)
	ctx := context.Background()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n = (n + 1) % replayKeys
		if err := selectRow(ctx, e, hashes[n]); err != nil {
			b.Fatal(err)
		}
	}
}

// The fresh suite's two sides on the real MariaDB at the suite's
// concurrency of 16 (RunParallel, 8 goroutines per CPU on this 2-CPU VM),
// with cpu-ns/op: the client's CPU per fresh key, the garbage collector
// and the scheduler included, which on a machine the database shares is
// taken from the database.

func BenchmarkFreshMySQL(b *testing.B) {
	e, _ := newFreshEnv(b)
	g, err := e.newGuard(nil)
	require.NoError(b, err)
	b.Cleanup(func() { closeGuard(g) })
	var seq atomic.Int64
	runParallelCPU(b, func(ctx context.Context) error {
		n := seq.Add(1)
		res, err := g.Do(ctx, idemguard.Call{Tenant: tenantGuard, Scope: scopeFresh,
			ClientKey: "fresh-" + strconv.FormatInt(n, 10), Inputs: inputs{Doc: n, Text: textHash}}, noop)
		if err == nil && (res.Cached || res.Status != idemguard.StatusSucceeded) {
			err = fmt.Errorf("fresh key answered status %s cached %t", res.Status, res.Cached)
		}
		return err
	})
}

// BenchmarkFreshMySQLAudited is BenchmarkFreshMySQL with the audit suite's
// fresh-audit-on guard: the trail stored (the claim's event carried by its
// INSERT) and observed, with an observer that counts it.
func BenchmarkFreshMySQLAudited(b *testing.B) {
	e, _ := newFreshEnv(b)
	var observed atomic.Int64
	g, err := e.newGuard(func(c *idemguard.Config) {
		c.Audit = idemguard.AuditConfig{Store: true, Observe: true}
		c.Observe = func(e idemguard.Event) {
			if e.Kind == idemguard.EventAudit {
				observed.Add(1)
			}
		}
	})
	require.NoError(b, err)
	b.Cleanup(func() { closeGuard(g) })
	runParallelCPU(b, freshDo(g, scopeAuditFresh, "fresh-audit-", new(atomic.Int64)))
	if observed.Load() == 0 {
		b.Fatal("the audited guard observed no event")
	}
}

func BenchmarkRawInsertUpdateMySQL(b *testing.B) {
	e, body := newFreshEnv(b)
	runParallelCPU(b, rawInsertUpdate(e, scopeFresh, body))
}

func newFreshEnv(b *testing.B) (*env, []byte) {
	b.Helper()
	db := testdb.New(b)
	e := &env{log: slog.New(slog.NewTextHandler(io.Discard, nil)), db: db.DB,
		secret: []byte("bench-secret-0123456789abcdef-0123")}
	body, err := storedBody()
	require.NoError(b, err)
	return e, body
}

// runParallelCPU runs op from 16 goroutines on a context that can end, as
// the bench program's workers do, and reports cpu-ns/op.
func runParallelCPU(b *testing.B, op func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.ReportAllocs()
	b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
	cpu := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportCPU(b, cpu)
}
