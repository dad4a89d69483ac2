package routers

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

// The delivery members leave the body before the key and fingerprint are
// derived: a plain and a streamed request of one key are one operation.
// Keeping "stream" in the body makes the first two rows fail.
func TestDeliveryModeIsNotIdentity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body, want string
		stream           bool
	}{
		{"stream true", `{"messages":[1],"stream":true,"stream_options":{"include_usage":true}}`, `{"messages":[1]}`, true},
		{"stream false", `{"stream":false,"messages":[1]}`, `{"messages":[1]}`, false},
		{"no stream", `{"messages":[1],"x":"<a>"}`, `{"messages":[1],"x":"<a>"}`, false},
		{"numbers kept as written", `{"t":1.50,"stream":true}`, `{"t":1.50}`, true},
		{"not an object", `["stream"]`, `["stream"]`, false},
		{"repeated member left to the operation", `{"stream":true,"stream":false}`, `{"stream":true,"stream":false}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, stream, err := deliveryMode([]byte(tc.body))
			require.NoError(t, err)
			require.Equal(t, tc.want, string(got))
			require.Equal(t, tc.stream, stream)
		})
	}
	_, _, err := deliveryMode([]byte(`{"stream":"yes"}`))
	require.ErrorIs(t, err, pipeline.ErrInvalidBody)
}

// Waiters of one key are bounded: over the guard's MaxWaiters a request
// with Prefer: wait is refused at once with 429 and Retry-After, never
// queued. Without the bound both waiters wait and no 429 comes.
func TestTooManyWaitersIs429(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{guard: func(c *idemguard.Config) { c.MaxWaiters = 1 }})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer b.releaseNow()
	wg.Go(func() { b.post("slow", "w-1", `{}`) })
	<-b.started
	codes := make(chan int, 2)
	for range 2 {
		wg.Go(func() { codes <- b.post("slow", "w-1", `{}`, "Prefer", "wait=20").Code })
	}
	select {
	case code := <-codes:
		require.Equal(t, http.StatusTooManyRequests, code, "the second waiter is refused at once")
	case <-time.After(15 * time.Second):
		t.Fatal("no waiter was refused")
	}
	b.releaseNow()
	require.Equal(t, http.StatusOK, <-codes)
}
