package main

import (
	"context"
	"io"
	"log/slog"
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
