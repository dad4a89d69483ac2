package routers

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/testhooks"
	"github.com/idemguard/idemguard/routers/middleware"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
	"github.com/idemguard/idemguard/tenancy"
)

// acmeMiddleware is the middleware's options for scope on a new guard over
// st: every request is tenant acme's.
func acmeMiddleware(t *testing.T, st store.Store, scope string) middleware.Options {
	t.Helper()
	g, err := idemguard.New(idemguard.Config{Store: st, Secret: testSecret})
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	return middleware.Options{Guard: g, Scope: scope, Tenant: func(*http.Request) (tenancy.ID, error) { return "acme", nil }}
}

// guardedChatRoute is POST /chat served by handler behind the middleware of
// kind, "gin" or "net/http".
func guardedChatRoute(kind string, opts middleware.Options, handler func(http.ResponseWriter)) http.Handler {
	if kind == "gin" {
		gin.SetMode(gin.TestMode)
		r := gin.New()
		r.POST("/chat", Idempotent(opts), func(c *gin.Context) { handler(c.Writer) })
		return r
	}
	return middleware.Idempotent(opts)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { handler(w) }))
}

// postStreamChat sends POST /chat with the key stream-1 and accept (if any) to srv.
func postStreamChat(t *testing.T, srv *httptest.Server, accept string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/chat", strings.NewReader(`{"q":1}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "stream-1")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	client := &http.Client{Transport: srv.Client().Transport, Timeout: 20 * time.Second}
	resp, err := client.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// firstEventWhileRunning reads the first event's two lines from br, failing (after
// open) when they do not arrive within 10 seconds.
func firstEventWhileRunning(t *testing.T, br *bufio.Reader, open func()) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		id, _ := br.ReadString('\n')
		l, _ := br.ReadString('\n')
		got <- id + l
	}()
	select {
	case line := <-got:
		return line
	case <-time.After(10 * time.Second):
		open()
		t.Fatal("the first event did not arrive while the handler ran")
		return ""
	}
}

// A handler behind the middleware that writes server-sent events, asked
// for with Accept: text/event-stream: its events reach the client as it
// flushes them (the first before the handler finishes), are stored with
// the blocklist applied at every depth, and are replayed byte for byte; the
// handler runs once. Without the capture hook in bufferedWriter.Write the
// handler's events are buffered and the first request times out.
func TestMiddlewareCapturesAndReplaysAHandlersStream(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"gin", "net/http"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			opts := acmeMiddleware(t, memstore.New(), "chat.stream")
			var runs atomic.Int32
			gate := make(chan struct{})
			open := sync.OnceFunc(func() { close(gate) })
			srv := httptest.NewServer(guardedChatRoute(kind, opts, func(w http.ResponseWriter) {
				runs.Add(1)
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "data: {\"delta\":\"Hel\",\"debug\":{\"prompt\":\"CANARY\"}}\n\n")
				w.(http.Flusher).Flush()
				<-gate
				fmt.Fprint(w, "event: usage\ndata: {\"tokens\":2,\"nested\":[{\"Provider\":\"CANARY\",\"ok\":1}]}\n\n")
				fmt.Fprint(w, "data: [DONE]\n\n")
			}))
			t.Cleanup(srv.Close)
			t.Cleanup(open) // runs first: never leave the handler blocked

			first := postStreamChat(t, srv, "text/event-stream")
			require.Equal(t, http.StatusOK, first.StatusCode)
			require.Equal(t, "text/event-stream", first.Header.Get("Content-Type"))
			br := bufio.NewReader(first.Body)
			line := firstEventWhileRunning(t, br, open)
			require.Regexp(t, `^id: 1-[0-9a-f]{8}-1\ndata: \{"delta":"Hel"\}\n$`, line, "each event carries its id")
			open()
			rest, err := io.ReadAll(br)
			require.NoError(t, err)
			live := line + string(rest)
			require.NotContains(t, live, "CANARY", "blocked fields are dropped at every depth")
			require.Contains(t, live, "event: usage\n")

			replay := postStreamChat(t, srv, "text/event-stream")
			body, err := io.ReadAll(replay.Body)
			require.NoError(t, err)
			require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
			require.Equal(t, live, string(body), "the replay is what the first caller got, byte for byte")

			plain := postStreamChat(t, srv, "")
			pb, err := io.ReadAll(plain.Body)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, plain.StatusCode)
			require.JSONEq(t, `{"ok":true,"stopReason":"completed","needsHuman":false,"cached":true,"data":{"events":3}}`, string(pb))
			require.EqualValues(t, 1, runs.Load())
		})
	}
}

// An event whose data holds several JSON documents (one per data line) has
// the blocklist applied to each of them, and the removal is counted as for
// any answer. Before the fix the decoder saw more input after the first
// document and kept the data as written: the blocked member was stored and
// replayed.
func TestMiddlewareCleansEveryDocumentOfAnEvent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var dropped []string
	g, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: testSecret, Observe: func(e idemguard.Event) {
		if e.Kind == idemguard.EventDroppedField {
			mu.Lock()
			dropped = append(dropped, e.Field)
			mu.Unlock()
		}
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	opts := middleware.Options{Guard: g, Scope: "chat.stream",
		Tenant: func(*http.Request) (tenancy.ID, error) { return "acme", nil }}
	var runs atomic.Int32
	h := middleware.Idempotent(opts)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"prompt\":\"CANARY\"}\ndata: {\"delta\":\"x\"}\n\n")
		fmt.Fprint(w, "data: {\"a\":1} {\"b\":{\"Debug\":\"CANARY\"}}\n\n")
		fmt.Fprint(w, "data: note\ndata: {\"\\u0070rompt\":\"CANARY\"}\n\n") // a text line and an escaped key
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	send := func() string {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/chat", strings.NewReader(`{"q":1}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "multi-1")
		req.Header.Set("Accept", "text/event-stream")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(body)
	}
	live := send()
	require.NotContains(t, live, "CANARY")
	run := live[len("id: "):strings.Index(live, "\n")]
	run = run[:strings.LastIndexByte(run, '-')]
	require.Equal(t, strings.ReplaceAll("id: RUN-1\ndata: {}\ndata: {\"delta\":\"x\"}\n\nid: RUN-2\ndata: {\"a\":1}\ndata: {\"b\":{}}\n\n"+
		"id: RUN-3\ndata: note\ndata: {}\n\nid: RUN-4\ndata: [DONE]\n\n", "RUN", run), live)
	require.Equal(t, live, send(), "the replay is the cleaned stream")
	require.EqualValues(t, 1, runs.Load())
	mu.Lock()
	defer mu.Unlock()
	require.ElementsMatch(t, []string{"prompt", "b.Debug"}, dropped, "each removed member is counted once")
}

// The guard's test knob blocklist-multi-document reaches the middleware's
// reading of events (internal/eventdata, which the simulation's streams
// share): with it, the event of two documents is relayed as written, as
// before the fix. So the defect the simulation puts back is this one.
func TestMiddlewareReadsEventsWithTheGuardsDefectKnob(t *testing.T) {
	t.Parallel()
	cfg := idemguard.Config{Store: memstore.New(), Secret: testSecret}
	testhooks.ConfigKnobs(&cfg).Defect = testhooks.DefectBlocklistMultiDocument
	g, err := idemguard.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	h := middleware.Idempotent(middleware.Options{Guard: g, Scope: "chat.stream",
		Tenant: func(*http.Request) (tenancy.ID, error) { return "acme", nil }})(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"prompt\":\"CANARY\"}\ndata: {\"delta\":\"x\"}\n\n")
		}))
	req := httptest.NewRequest(http.MethodPost, "/chat", strings.NewReader(`{"q":1}`))
	req.Header.Set("Idempotency-Key", "knob-1")
	req.Header.Set("Accept", "text/event-stream")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Contains(t, rec.Body.String(), "data: {\"prompt\":\"CANARY\"}\ndata: {\"delta\":\"x\"}\n\n")
}

// A key completed by a plain request through a middleware that keeps the
// handler's own JSON (Options.Keep), asked for again as a stream, streams
// that document as its one event. Before the fix the stream got a blank
// envelope ({"ok":false,"stopReason":"",...}) with 200.
func TestMiddlewareStreamsAKeptDocumentAsItself(t *testing.T) {
	t.Parallel()
	g, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: testSecret})
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	opts := middleware.Options{Guard: g, Scope: "orders", Keep: sanitize.MustAllowlist("id", "status"),
		Tenant: func(*http.Request) (tenancy.ID, error) { return "acme", nil }}
	var runs atomic.Int32
	h := middleware.Idempotent(opts)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"ord_1","status":"paid","prompt":"CANARY"}`)
	}))
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	send := func(accept string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"q":1}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "doc-1")
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(body)
	}
	resp, plain := send("")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `{"id":"ord_1","status":"paid"}`, plain)

	resp, streamed := send("text/event-stream")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Regexp(t, `^id: 1-[0-9a-f]{8}-1\n`, streamed)
	require.Equal(t, "data: "+plain+"\n\n", streamed[strings.IndexByte(streamed, '\n')+1:], "the stored document, as one event")
	require.EqualValues(t, 1, runs.Load())
}
