package pipeline

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
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
		got, err := readAll(iotest.HalfReader(strings.NewReader(body)), declared, 1000)
		require.NoError(t, err, "declared %d", declared)
		require.Equal(t, body, string(got), "declared %d", declared)
	}
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = readAll(strings.NewReader(body), int64(len(body)), 1<<20)
	})
	require.LessOrEqual(t, allocs, 2.0, "the declared length is read into one buffer")

	// A declared length is not bytes in hand: a client that declares a huge
	// body and sends a little makes readAll allocate no more than
	// readAllPrealloc (it allocated the whole declared length, and panicked
	// on math.MaxInt64, before).
	for _, declared := range []int64{1 << 30, math.MaxInt64} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got, err := readAll(strings.NewReader("small"), declared, math.MaxInt64)
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		require.Equal(t, "small", string(got))
		require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(4*readAllPrealloc), "declared %d", declared)
	}

	boom := errors.New("boom")
	_, err := readAll(io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(boom)), 10, 100)
	require.ErrorIs(t, err, boom)
}

// readAll stops one byte past max, whatever the declared length says (a
// body may be longer than declared when it is not net/http's own), and
// accepts exactly max.
func TestReadAllLimit(t *testing.T) {
	body := strings.Repeat("x", 100)
	for _, declared := range []int64{-1, 0, 1, 50, 99, 100, 101, 5000} {
		got, err := readAll(iotest.HalfReader(strings.NewReader(body)), declared, 99)
		require.ErrorIs(t, err, errOverLimit, "declared %d", declared)
		require.Len(t, got, 100, "declared %d", declared)
		got, err = readAll(iotest.HalfReader(strings.NewReader(body)), declared, 100)
		require.NoError(t, err, "declared %d", declared)
		require.Equal(t, body, string(got), "declared %d", declared)
	}
	_, err := readAll(strings.NewReader("x"), 1, 0)
	require.ErrorIs(t, err, errOverLimit)
}

// A body over the limit is answered as http.MaxBytesReader had it: 413
// (the pipeline's), and net/http closes the connection after the answer
// rather than reading the rest; a body read with the caller's own
// MaxBytesReader is 413 too. The body is read without a MaxBytesReader of
// the pipeline's: one allocation, the buffer.
func TestReadJSONBodyOverTheLimit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/own" {
			r.Body = http.MaxBytesReader(w, r.Body, 5)
		}
		_, _, err := readJSONBody(w, r, 10)
		if err != nil {
			w.WriteHeader(ProblemFor(err).Status)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	for _, c := range []struct {
		path, body string
		chunked    bool
		status     int
		closed     bool
	}{
		{"/", `{"a":"0123456789"}`, true, http.StatusRequestEntityTooLarge, true},
		{"/", `{"a":"0123456789"}`, false, http.StatusRequestEntityTooLarge, false}, // refused by its declared length
		{"/", `{"a":1}`, true, http.StatusOK, false},
		{"/own", `{"a":1}`, true, http.StatusRequestEntityTooLarge, true},
	} {
		var rd io.Reader = strings.NewReader(c.body)
		if c.chunked {
			rd = io.MultiReader(rd) // no length known: sent chunked
		}
		resp, err := http.Post(srv.URL+c.path, "application/json", rd)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, c.status, resp.StatusCode, c)
		require.Equal(t, c.closed, resp.Close, c)
	}

	body := []byte(`{"a":1}`)
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.ContentLength = int64(len(body))
	rd := bytes.NewReader(body)
	w := httptest.NewRecorder()
	allocs := testing.AllocsPerRun(100, func() {
		rd.Reset(body)
		r.Body = io.NopCloser(rd)
		if _, _, err := readJSONBody(w, r, 10); err != nil {
			t.Fatal(err)
		}
	})
	require.Equal(t, 2.0, allocs, "the body's buffer and the test's NopCloser")
}
