package routers

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/idemguardtest"
	"github.com/idemguard/idemguard/internal/live"
	"github.com/idemguard/idemguard/internal/ssetest"
)

// sseEvent is one event of a stream as a client reads it.
type sseEvent struct{ id, kind, data string }

// openEvents opens GET …/keys/{key}/events on srv and returns the status and
// a channel of its events (closed when the stream ends).
func openEvents(t *testing.T, srv *httptest.Server, path, lastEventID string) (int, <-chan sseEvent) {
	t.Helper()
	return ssetest.Open(t, srv.Client(), srv.URL+path, acmeKey1, lastEventID, func(e live.Event) (sseEvent, error) {
		return sseEvent{id: e.ID, kind: e.Type, data: string(e.Data)}, nil
	})
}

func nextEvent(t *testing.T, ch <-chan sseEvent) (sseEvent, bool) {
	t.Helper()
	return ssetest.Next(t, ch, 10*time.Second)
}

func TestRespondAsyncWatchAndCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{guard: func(c *idemguard.Config) {
		idemguardtest.SetHeartbeatEvery(c, 20*time.Millisecond)
		c.MaxWatchersPerKey = 1
	}})
	srv := httptest.NewServer(b.handler)
	t.Cleanup(srv.Close)
	async := []string{"Prefer", "respond-async"}

	first := b.post("slow", "job-1", `{"n":1}`, async...)
	require.Equal(t, http.StatusAccepted, first.Code, first.Body.String())
	require.Equal(t, "/v1/ops/slow/keys/job-1", first.Header().Get("Location"))
	require.Equal(t, "respond-async", first.Header().Get("Preference-Applied"))
	var rec keyRecord
	require.NoError(t, json.Unmarshal(first.Body.Bytes(), &rec))
	require.Equal(t, "started", rec.Status)
	requireJoined(t, first, false)
	<-b.started

	dup := b.post("slow", "job-1", `{"n":1}`, async...)
	require.Equal(t, http.StatusAccepted, dup.Code, "a duplicate while it runs is the same job: %s", dup.Body.String())
	require.Equal(t, first.Header().Get("Location"), dup.Header().Get("Location"))
	requireJoined(t, dup, true)
	require.EqualValues(t, 1, b.calls["slow"].Load())

	code, events := openEvents(t, srv, "/v1/ops/slow/keys/job-1/events", "")
	require.Equal(t, http.StatusOK, code)
	started, _ := nextEvent(t, events)
	require.Equal(t, "started", started.kind)
	require.True(t, strings.HasPrefix(started.id, "1.started."), started.id)
	// One watcher of this key at a time here: the second is refused.
	second := b.do(req{method: http.MethodGet, path: "/v1/ops/slow/keys/job-1/events", apiKey: acmeKey1})
	require.Equal(t, http.StatusTooManyRequests, second.Code)
	require.Equal(t, "urn:idemguard:problem:too-many-waiters", problemOf(t, second)["type"])

	cancelJob1(t, b)
	last := followToCanceled(t, events)

	finished := b.do(req{method: http.MethodPost, path: "/v1/ops/slow/keys/job-1/cancel", apiKey: acmeKey1})
	require.Equal(t, http.StatusConflict, finished.Code)
	require.Equal(t, "urn:idemguard:problem:key-finished", problemOf(t, finished)["type"])
	code, _ = openEvents(t, srv, "/v1/ops/slow/keys/job-1/events", last.id)
	require.Equal(t, http.StatusNoContent, code, "nothing after the final event: an EventSource stops reconnecting")

	again := b.post("slow", "job-1", `{"n":1}`, async...)
	require.Equal(t, http.StatusAccepted, again.Code, again.Body.String())
	requireJoined(t, again, false)
	<-b.started
	require.EqualValues(t, 2, b.calls["slow"].Load(), "a canceled key runs again")
	b.releaseNow()
	require.Eventually(t, func() bool {
		w := b.do(req{method: http.MethodGet, path: "/v1/ops/slow/keys/job-1", apiKey: acmeKey1})
		return strings.Contains(w.Body.String(), `"status":"succeeded"`)
	}, 10*time.Second, 10*time.Millisecond)
	replay := b.post("slow", "job-1", `{"n":1}`, async...)
	require.Equal(t, http.StatusOK, replay.Code)
	require.Equal(t, "true", replay.Header().Get("Idempotent-Replayed"))
}

// cancelJob1 asks to cancel acme's running job-1 of the "slow" scope: as
// beta and under an unknown key, not found; as acme, accepted.
func cancelJob1(t *testing.T, b *testBundle) {
	t.Helper()
	require.Equal(t, http.StatusNotFound, b.do(req{method: http.MethodPost, path: "/v1/ops/slow/keys/job-1/cancel", apiKey: betaKey}).Code,
		"another tenant's key is unknown")
	require.Equal(t, http.StatusNotFound, b.do(req{method: http.MethodPost, path: "/v1/ops/slow/keys/nope/cancel", apiKey: acmeKey1}).Code)
	cancel := b.do(req{method: http.MethodPost, path: "/v1/ops/slow/keys/job-1/cancel", apiKey: acmeKey1})
	require.Equal(t, http.StatusAccepted, cancel.Code, cancel.Body.String())
}

// followToCanceled reads events until the stream ends: heartbeats, the
// cancel request, and last the canceled key's record, which it returns.
func followToCanceled(t *testing.T, events <-chan sseEvent) sseEvent {
	t.Helper()
	var last sseEvent
	for e, ok := nextEvent(t, events); ok; e, ok = nextEvent(t, events) {
		require.Contains(t, []string{"alive", "cancel_requested", "canceled"}, e.kind)
		last = e
	}
	require.Equal(t, "canceled", last.kind)
	var data struct {
		Record keyRecord `json:"record"`
	}
	require.NoError(t, json.Unmarshal([]byte(last.data), &data))
	require.Equal(t, "failed", data.Record.Status)
	require.JSONEq(t, `{"ok":false,"stopReason":"canceled","needsHuman":false,"cached":false}`, string(data.Record.Response))
	return last
}

// requireJoined checks a 202's events link (Link rel="monitor" and
// eventsUrl) and whether it is marked as having joined a running job
// (Idempotent-Existing and existing): without them a duplicate's 202 is the
// first one's, and a client builds the events URL itself.
func requireJoined(t *testing.T, w *httptest.ResponseRecorder, existing bool) {
	t.Helper()
	var rec keyRecord
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &rec))
	events := w.Header().Get("Location") + "/events"
	require.Equal(t, events, rec.EventsURL)
	require.Equal(t, "<"+events+`>; rel="monitor"`, w.Header().Get("Link"))
	require.NotNil(t, rec.Existing)
	require.Equal(t, existing, *rec.Existing)
	require.Equal(t, map[bool]string{true: "true", false: ""}[existing], w.Header().Get("Idempotent-Existing"))
}

func TestRespondAsyncWithWaitAnswersTheOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.post("echo", "quick-1", `{"n":2}`, "Prefer", "respond-async, wait=5")
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, "wait=5", w.Header().Get("Preference-Applied"))
	require.Empty(t, w.Header().Get("Idempotent-Replayed"), "the first caller's own answer")
	require.Contains(t, w.Body.String(), `"cached":false`)
	replay := b.post("echo", "quick-1", `{"n":2}`)
	require.Equal(t, w.Body.String(), string(asFresh(replay.Body.Bytes())))
}

// An event stream lasts as long as its job, past the server's ReadTimeout
// (serve sets one): net/http clears the read deadline once a request is
// read. A read deadline left on the connection (a wrapper that sets one, a
// change of net/http) would cancel the request after 200ms and fail this.
func TestEventStreamOutlivesReadTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{guard: func(c *idemguard.Config) { idemguardtest.SetHeartbeatEvery(c, 20*time.Millisecond) }})
	srv := httptest.NewUnstartedServer(b.handler)
	srv.Config.ReadTimeout = 200 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	require.Equal(t, http.StatusAccepted, b.post("slow", "long-stream", `{"n":1}`, "Prefer", "respond-async").Code)
	<-b.started
	code, events := openEvents(t, srv, "/v1/ops/slow/keys/long-stream/events", "")
	require.Equal(t, http.StatusOK, code)
	deadline := time.Now().Add(600 * time.Millisecond)
	for time.Now().Before(deadline) {
		e, ok := nextEvent(t, events)
		require.True(t, ok, "the stream ended after %s", 600*time.Millisecond-time.Until(deadline))
		require.Contains(t, []string{"started", "alive"}, e.kind)
	}
	b.releaseNow()
	var last sseEvent
	for e, ok := nextEvent(t, events); ok; e, ok = nextEvent(t, events) {
		last = e
	}
	require.Equal(t, "succeeded", last.kind)
}

// Prefer: respond-async checks the inputs like any request: one that fails
// the operation's schema is a 400 before any claim, with no key reference.
// Without Check in runAsync's Call the job would be accepted (202).
func TestRespondAsyncChecksTheInputsBeforeTheClaim(t *testing.T) {
	t.Parallel()
	b, calls := chatSetup(t, http.StatusOK)
	w := b.post("chat", "bad-job", `{"prompt":"hi"}`, "Prefer", "respond-async")
	require.Equal(t, http.StatusBadRequest, w.Code, w.Body.String())
	require.Empty(t, w.Header().Get("Location"))
	require.Zero(t, calls.Load())
	require.Empty(t, b.store.Rows())
}

// Cancel works on a key whatever started it: a synchronous caller waiting
// for its answer gets a 502 with stopReason canceled, a failure like any
// retryable one (the client library then keeps its key and does not retry
// on its own), and the same request runs it again.
func TestCancelOfASynchronousCall(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{guard: func(c *idemguard.Config) { idemguardtest.SetHeartbeatEvery(c, 20*time.Millisecond) }})
	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() { answered <- b.post("slow", "sync-1", `{"n":1}`) }()
	<-b.started
	cancel := b.do(req{method: http.MethodPost, path: "/v1/ops/slow/keys/sync-1/cancel", apiKey: acmeKey1})
	require.Equal(t, http.StatusAccepted, cancel.Code, cancel.Body.String())
	var w *httptest.ResponseRecorder
	select {
	case w = <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the canceled call did not answer")
	}
	require.Equal(t, http.StatusBadGateway, w.Code, w.Body.String())
	p := problemOf(t, w)
	require.Equal(t, "canceled", p["stopReason"])
	require.Contains(t, p["detail"], "canceled on request")
	b.releaseNow()
	again := b.post("slow", "sync-1", `{"n":1}`)
	require.Equal(t, http.StatusOK, again.Code, again.Body.String())
	require.EqualValues(t, 2, b.calls["slow"].Load())
}

// A key whose row was made under a previous secret is found by cancel (and
// watch) through a replica that claims under the new one: the route looks
// the client key up under every configured secret. Without that lookup the
// cancel computes the new secret's hash and answers 404.
func TestCancelFindsAKeyMadeUnderAPreviousSecret(t *testing.T) {
	t.Parallel()
	old := setup(t, setupOpts{guard: func(c *idemguard.Config) { idemguardtest.SetHeartbeatEvery(c, 20*time.Millisecond) }})
	rotated := setup(t, setupOpts{guard: func(c *idemguard.Config) {
		c.Store, c.Secret, c.SecretID = old.store, []byte("a-new-secret-0123456789abcdef-0123456789"), "new"
		c.PreviousSecrets = []idemguard.SecretVersion{{Secret: testSecret}}
	}})
	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() { answered <- old.post("slow", "rot-1", `{"n":1}`) }()
	<-old.started
	cancel := rotated.do(req{method: http.MethodPost, path: "/v1/ops/slow/keys/rot-1/cancel", apiKey: acmeKey1})
	require.Equal(t, http.StatusAccepted, cancel.Code, cancel.Body.String())
	select {
	case w := <-answered:
		require.Equal(t, http.StatusBadGateway, w.Code, w.Body.String())
		require.Equal(t, "canceled", problemOf(t, w)["stopReason"])
	case <-time.After(10 * time.Second):
		t.Fatal("the canceled call did not answer")
	}
}
