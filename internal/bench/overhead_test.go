package main

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
)

// The guard's own CPU cost per call, without a database: the same calls as
// the fresh and replay suites, on the in-memory store. The MySQL suites
// show what this costs next to real round trips.

func newMemGuard(b *testing.B, mutate func(*idemguard.Config)) *idemguard.Guard {
	b.Helper()
	cfg := idemguard.Config{Store: memstore.New(), Secret: []byte("bench-secret-0123456789abcdef-0123")}
	if mutate != nil {
		mutate(&cfg)
	}
	g, err := idemguard.New(cfg)
	require.NoError(b, err)
	b.Cleanup(func() { require.NoError(b, g.Close(context.Background())) })
	return g
}

func BenchmarkGuardFreshMemstore(b *testing.B) { benchmarkFresh(b, nil) }

// The audited twins: the audit trail on (memory store, counting observer),
// for its allocations per call against the lines above.
func BenchmarkGuardFreshMemstoreAudited(b *testing.B)        { benchmarkFresh(b, auditOn) }
func BenchmarkGuardReplayCachedMemstoreAudited(b *testing.B) { benchmarkReplay(b, 0, auditOn) }
func BenchmarkGuardReplayStoreMemstoreAudited(b *testing.B)  { benchmarkReplay(b, -1, auditOn) }

// The audited twins' fair baseline: the same observer, the audit trail
// off (serve's guard always has an observer, for its metrics).
func BenchmarkGuardReplayCachedMemstoreObserved(b *testing.B) { benchmarkReplay(b, 0, observed) }

func observed(c *idemguard.Config) { c.Observe = func(idemguard.Event) {} }

// The audit trail stored but not observed: a cached replay then only
// counts in its key's tally, building no event.
func BenchmarkGuardReplayCachedMemstoreAuditStored(b *testing.B) { benchmarkReplay(b, 0, auditStored) }

func auditStored(c *idemguard.Config) { c.Audit = idemguard.AuditConfig{Store: true} }

func auditOn(c *idemguard.Config) {
	c.Audit = idemguard.AuditConfig{Store: true, Observe: true}
	c.Observe = func(idemguard.Event) {}
}

func benchmarkFresh(b *testing.B, mutate func(*idemguard.Config)) {
	freshLoop(context.Background(), b, newMemGuard(b, mutate))
}

// freshLoop calls g on a fresh client key per iteration, and reports
// allocations and cpu-ns/op.
func freshLoop(ctx context.Context, b *testing.B, g *idemguard.Guard) {
	b.ReportAllocs()
	cpu := processCPU()
	n := int64(0)
	for b.Loop() {
		n++
		res, err := g.Do(ctx, idemguard.Call{Tenant: tenantGuard, Scope: scopeFresh,
			ClientKey: "fresh-" + strconv.FormatInt(n, 10), Inputs: inputs{Doc: n, Text: textHash}}, noop)
		if err != nil || res.Cached {
			b.Fatalf("fresh call: cached %t, err %v", res.Cached, err)
		}
	}
	reportCPU(b, cpu)
}

func benchmarkReplay(b *testing.B, cacheSize int, mutate ...func(*idemguard.Config)) {
	g := newMemGuard(b, func(c *idemguard.Config) {
		c.ReplayCacheSize = cacheSize
		for _, m := range mutate {
			m(c)
		}
	})
	for n := range int64(replayKeys) {
		_, err := g.Do(context.Background(), replayCall(n), noop)
		require.NoError(b, err)
	}
	loopReplays(b, g)
}

// loopReplays replays the replay keys (already succeeded on g) round-robin
// for b's loop and fails on any answer but a cached one.
func loopReplays(b *testing.B, g *idemguard.Guard) {
	ctx := context.Background()
	b.ReportAllocs()
	n := int64(0)
	cpu := processCPU()
	for b.Loop() {
		n = (n + 1) % replayKeys
		res, err := g.Do(ctx, replayCall(n), noop)
		if err != nil || !res.Cached {
			b.Fatalf("replay: cached %t, err %v", res.Cached, err)
		}
	}
	reportCPU(b, cpu)
}

func BenchmarkGuardReplayCachedMemstore(b *testing.B) { benchmarkReplay(b, 0) }
func BenchmarkGuardReplayStoreMemstore(b *testing.B)  { benchmarkReplay(b, -1) }

// BenchmarkEnvelopeEncoding is the envelope work of one fresh call: the
// operation's value sanitized, encoded under the size policy, and the
// replay body encoded.
func BenchmarkEnvelopeEncoding(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		env, err := sanitize.FromValue(opValue)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := (sanitize.Policy{}).Encode(env); err != nil {
			b.Fatal(err)
		}
		env.Cached = true
		if _, err := sanitize.Marshal(env); err != nil {
			b.Fatal(err)
		}
	}
}

// forgetful is a store that answers a fresh key's two writes and keeps
// nothing: Claim wins with a new id, Complete lands. With it the fresh
// benchmarks measure the engine's own path, without the in-memory store's
// work and its growing heap (which the garbage collector scans on every
// cycle). Every other method is the in-memory store's.
type forgetful struct {
	store.Store
	ids atomic.Uint64
}

func (f *forgetful) Claim(context.Context, store.ClaimParams) (uint64, error) {
	return f.ids.Add(1), nil
}

func (f *forgetful) Complete(context.Context, store.CompleteParams) (bool, time.Time, error) {
	return true, time.Now().UTC(), nil
}

// BenchmarkGuardFreshEngine is a fresh key's path through the engine on
// a store that does no work (forgetful), with cpu-ns/op: what the guard
// adds to the two statements of the raw floor, on the CPU the database
// shares. BenchmarkGuardFreshEngineAudited is the same with the audit
// trail on.
func BenchmarkGuardFreshEngine(b *testing.B)        { benchmarkFreshEngine(b, nil) }
func BenchmarkGuardFreshEngineAudited(b *testing.B) { benchmarkFreshEngine(b, auditOn) }

func benchmarkFreshEngine(b *testing.B, mutate func(*idemguard.Config)) {
	g := newMemGuard(b, func(c *idemguard.Config) {
		c.Store = &forgetful{Store: memstore.New()}
		if mutate != nil {
			mutate(c)
		}
	})
	ctx, cancel := context.WithCancel(context.Background()) // a request's context can end
	defer cancel()
	freshLoop(ctx, b, g)
}

// BenchmarkGuardFreshEngineRotating is BenchmarkGuardFreshEngine with a
// previous secret configured: the rotation suite's extra CPU a fresh key
// (the other secret's key hash and fingerprint, and the read of the
// request's rows under it after the claim) without the round trip.
func BenchmarkGuardFreshEngineRotating(b *testing.B) {
	benchmarkFreshEngine(b, func(c *idemguard.Config) {
		c.SecretID = "new"
		c.PreviousSecrets = []idemguard.SecretVersion{{ID: "old", Secret: []byte("bench-previous-secret-0123456789abcdef")}}
	})
}
