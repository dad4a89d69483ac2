package routers

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestAuthFailureLimit: after Max failed authentications within the window
// a client's requests get 429 with Retry-After before their credential is
// checked (a right key too), counted and logged once, without the
// credential; other clients are served; the client recovers when its window
// ends. Missing credentials are not guesses and do not count; the number of
// clients tracked is bounded.
func TestAuthFailureLimit(t *testing.T) {
	t.Parallel()
	clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var limited atomic.Int32
	b := setup(t, setupOpts{options: func(o *Options) {
		o.AuthFailures = AuthFailureLimit{Max: 3, Window: time.Minute, MaxClients: 2, Now: clock.Now,
			OnLimited: func() { limited.Add(1) }}
	}})
	send := func(client, key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/ops/echo", strings.NewReader(`{"a":1}`))
		r.RemoteAddr = client + ":40000"
		if key != "" {
			r.Header.Set("Authorization", "Bearer "+key)
		}
		w := httptest.NewRecorder()
		b.handler.ServeHTTP(w, r)
		return w
	}
	const attacker, other = "198.51.100.7", "203.0.113.9"
	for range 5 {
		require.Equal(t, http.StatusUnauthorized, send(attacker, "").Code, "missing credentials do not count")
	}
	for i := range 3 {
		require.Equal(t, http.StatusUnauthorized, send(attacker, "guess-"+string(rune('a'+i))).Code)
	}
	for _, key := range []string{"guess-d", acmeKey1} {
		w := send(attacker, key)
		require.Equal(t, http.StatusTooManyRequests, w.Code, "refused before the credential is checked")
		require.Equal(t, "60", w.Header().Get("Retry-After"))
		p := problemOf(t, w)
		require.Equal(t, ProblemTypePrefix+"too-many-failed-authentications", p["type"])
	}
	require.Equal(t, int32(2), limited.Load())
	require.Equal(t, http.StatusOK, send(other, acmeKey1).Code, "another client is served")

	clock.Advance(30 * time.Second)
	w := send(attacker, acmeKey1)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, "30", w.Header().Get("Retry-After"))
	clock.Advance(30 * time.Second)
	require.Equal(t, http.StatusOK, send(attacker, acmeKey1).Code, "the window is over")
	require.Equal(t, http.StatusUnauthorized, send(attacker, "guess-e").Code, "a new window")

	logged := b.logs.Lines(t, "http: too many failed authentications from one client; refusing it until its window ends")
	require.Len(t, logged, 1, "once per client and window")
	require.Equal(t, attacker, logged[0]["client"])
	require.NotContains(t, b.logs.String(), "guess-")

}

// TestAuthFailuresBounded: over MaxClients the client whose window began
// first is forgotten.
func TestAuthFailuresBounded(t *testing.T) {
	t.Parallel()
	clock := &testClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	f := newAuthFailures(AuthFailureLimit{Max: 2, Window: time.Minute, MaxClients: 2, Now: clock.Now}, slog.New(slog.DiscardHandler))
	for _, host := range []string{"a", "b", "a", "c"} {
		f.failed(host)
		clock.Advance(time.Second)
	}
	require.Len(t, f.clients, 2)
	require.NotContains(t, f.clients, "a", "a's window began first")
	require.Zero(t, f.blocked("a"), "a forgotten is a new client")
	f.failed("c")
	require.Positive(t, f.blocked("c"))
	require.Nil(t, newAuthFailures(AuthFailureLimit{Max: -1}, nil), "Max -1: off")
	var off *authFailures
	off.failed("x")
	require.Zero(t, off.blocked("x"))
}
