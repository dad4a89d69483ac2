package pipeline

import (
	"errors"
	"io"
	"math"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// TestReadAll: what io.ReadAll reads, whatever the declared length says,
// in one allocation when it is right.
func TestReadAll(t *testing.T) { //nolint:paralleltest // AllocsPerRun refuses parallel tests
	body := strings.Repeat("x", 1000)
	for _, declared := range []int64{-1, 0, 1, 999, 1000, 1001, 5000} {
		got, err := readAll(iotest.HalfReader(strings.NewReader(body)), declared)
		require.NoError(t, err, "declared %d", declared)
		require.Equal(t, body, string(got), "declared %d", declared)
	}
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = readAll(strings.NewReader(body), int64(len(body)))
	})
	require.LessOrEqual(t, allocs, 2.0, "the declared length is read into one buffer")

	// A declared length is not bytes in hand: a client that declares a huge
	// body and sends a little makes readAll allocate no more than
	// readAllPrealloc (it allocated the whole declared length, and panicked
	// on math.MaxInt64, before).
	for _, declared := range []int64{1 << 30, math.MaxInt64} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, err := readAll(strings.NewReader("small"), declared)
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		require.Equal(t, "small", string(got))
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(4*readAllPrealloc), "declared %d", declared)
	}

	boom := errors.New("boom")
	_, err := readAll(io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(boom)), 10)
	require.ErrorIs(t, err, boom)
}
