package main

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// gatedWriter records each Write; while gate is open (not nil), the first
// Write waits on it.
type gatedWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  int
	gate    chan struct{}
	entered chan struct{}
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	gate := w.gate
	w.gate = nil
	w.mu.Unlock()
	if gate != nil {
		close(w.entered)
		<-gate
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	return w.buf.Write(p)
}

// stuckLogWriter is a logWriter whose writer is inside its first write
// (of the line "first") until gate is closed.
func stuckLogWriter(t *testing.T) (gate chan struct{}, w *gatedWriter, lw *logWriter) {
	t.Helper()
	gate = make(chan struct{})
	w = &gatedWriter{gate: gate, entered: make(chan struct{})}
	lw = newLogWriter(w)
	_, err := lw.Write([]byte("first\n"))
	require.NoError(t, err)
	<-w.entered
	return gate, w, lw
}

func (w *gatedWriter) snapshot() (string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String(), w.writes
}

// TestLogWriterKeepsEveryLineInOrder: lines from many goroutines all arrive,
// whole, each goroutine's in its order, once Close returns.
func TestLogWriterKeepsEveryLineInOrder(t *testing.T) {
	t.Parallel()
	w := &gatedWriter{}
	lw := newLogWriter(w)
	const goroutines, lines = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range lines {
				_, err := fmt.Fprintf(lw, "g%d line %d\n", g, i)
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	require.NoError(t, lw.Close())
	out, _ := w.snapshot()
	next := make([]int, goroutines)
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, got, goroutines*lines)
	for _, line := range got {
		var g, i int
		_, err := fmt.Sscanf(line, "g%d line %d", &g, &i)
		require.NoError(t, err, "line %q", line)
		require.Equal(t, next[g], i, "goroutine %d's lines out of order", g)
		next[g]++
	}

	// After Close a line goes straight through.
	_, err := lw.Write([]byte("late\n"))
	require.NoError(t, err)
	out, _ = w.snapshot()
	require.True(t, strings.HasSuffix(out, "late\n"))
}

// TestLogWriterBatches: while one write is in progress, later lines queue
// without waiting for it and go out together in the next write. With a
// write per line (the handler writing to the file directly) this takes 101
// writes.
func TestLogWriterBatches(t *testing.T) {
	t.Parallel()
	gate, w, lw := stuckLogWriter(t)
	for i := range 100 {
		_, err := fmt.Fprintf(lw, "queued %d\n", i) // returns although the writer is stuck
		require.NoError(t, err)
	}
	close(gate)
	require.NoError(t, lw.Close())
	out, writes := w.snapshot()
	require.Equal(t, 2, writes, "the first line, then the 100 queued behind it in one write")
	require.Equal(t, 101, strings.Count(out, "\n"))
}

// TestLogWriterWaitsRatherThanDrops: more than maxQueuedLog bytes queued
// behind a stuck write are all written once it returns.
func TestLogWriterWaitsRatherThanDrops(t *testing.T) {
	t.Parallel()
	gate, w, lw := stuckLogWriter(t)
	line := []byte(strings.Repeat("x", 1023) + "\n")
	const n = 2 * maxQueuedLog / 1024
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range n {
			_, _ = lw.Write(line)
		}
	}()
	close(gate)
	<-done
	require.NoError(t, lw.Close())
	out, _ := w.snapshot()
	require.Equal(t, n+1, strings.Count(out, "\n"))
}
