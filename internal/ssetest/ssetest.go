// Package ssetest opens a server-sent event stream for a test, as a client
// of the service reads one (live.ReadSSE).
package ssetest

import (
	"bufio"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/live"
)

// Open sends GET url with client as the bearer of apiKey (and Last-Event-ID
// when lastEventID is set) and returns the answer's status and its events,
// each as conv makes it. On any status but 200 the channel is closed at once;
// on 200 the answer must be text/event-stream, and the channel closes when
// the stream ends, the test does, or conv fails (which fails the test).
func Open[T any](t testing.TB, client *http.Client, url, apiKey, lastEventID string, conv func(live.Event) (T, error)) (int, <-chan T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	r.Header.Set("Authorization", "Bearer "+apiKey)
	if lastEventID != "" {
		r.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := client.Do(r)
	require.NoError(t, err)
	out := make(chan T, 256)
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		close(out)
		return resp.StatusCode, out
	}
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	go func() {
		defer close(out)
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for {
			e, err := live.ReadSSE(br)
			if err != nil {
				return
			}
			v, err := conv(e)
			if err != nil {
				t.Errorf("event %q: %v", e.Data, err) // fails the test; the channel still closes
				return
			}
			out <- v
		}
	}()
	return resp.StatusCode, out
}

// Next waits up to within for the stream's next event; false when it ended.
// No event in time fails the test.
func Next[T any](t testing.TB, events <-chan T, within time.Duration) (T, bool) {
	t.Helper()
	select {
	case e, ok := <-events:
		return e, ok
	case <-time.After(within):
		t.Fatalf("no event within %s", within)
		var zero T
		return zero, false
	}
}
