package routers

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/testlog"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/routers/middleware"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
	"github.com/idemguard/idemguard/tenancy"
)

// mwBundle is a team's own gin app and net/http app with guarded routes.
type mwBundle struct {
	guard   *idemguard.Guard
	gin     http.Handler
	mux     http.Handler
	runs    atomic.Int32
	logs    *testlog.Buffer
	release chan struct{}
}

func mwSetup(t *testing.T) *mwBundle {
	t.Helper()
	b := &mwBundle{logs: &testlog.Buffer{}, release: make(chan struct{})}
	logger := slog.New(slog.NewJSONHandler(b.logs, nil))
	g, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: testSecret, Logger: logger})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
	b.guard = g
	opts := middleware.Options{Guard: g, Logger: logger, Tenant: func(r *http.Request) (tenancy.ID, error) {
		return tenancy.ParseID(r.Header.Get("X-Tenant"))
	}}

	b.gin = b.ginApp(opts)
	b.mux = b.muxApp(opts)
	return b
}

// ginApp is the team's gin app: its routes, each behind Idempotent(opts).
func (b *mwBundle) ginApp(opts middleware.Options) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.POST("/orders/:id", Idempotent(opts), func(c *gin.Context) {
		b.runs.Add(1)
		var in struct {
			Qty int `json:"qty"`
		}
		if err := c.ShouldBindJSON(&in); err != nil {
			c.JSON(http.StatusBadRequest, gin.H{"ok": false, "stopReason": "invalid_input"})
			return
		}
		c.Header("Location", "/orders/"+c.Param("id"))
		c.Header("X-Not-Replayed", "1")
		c.JSON(http.StatusCreated, gin.H{"ok": true, "data": gin.H{"id": c.Param("id"), "qty": in.Qty}})
	})
	r.POST("/text", Idempotent(opts), func(c *gin.Context) { b.runs.Add(1); c.String(http.StatusOK, "plain text") })
	r.POST("/stream", Idempotent(opts), func(c *gin.Context) {
		b.runs.Add(1)
		c.Writer.WriteHeader(http.StatusOK)
		c.Writer.Flush()
	})
	r.POST("/array", Idempotent(opts), func(c *gin.Context) { b.runs.Add(1); c.JSON(http.StatusOK, []int{1}) })
	var upstreamRuns atomic.Int32
	r.POST("/upstream", Idempotent(opts), func(c *gin.Context) {
		if upstreamRuns.Add(1) == 1 {
			c.JSON(http.StatusServiceUnavailable, gin.H{"error": "down"})
			return
		}
		c.JSON(http.StatusOK, gin.H{"ok": true})
	})
	r.POST("/dollar", Idempotent(opts), func(c *gin.Context) {
		b.runs.Add(1)
		c.Header("Set-Cookie", "session=canary")
		c.JSON(http.StatusOK, gin.H{"ok": true, "data": gin.H{"$location": "/elsewhere"}})
	})
	r.POST("/slow", Idempotent(opts), func(c *gin.Context) {
		b.runs.Add(1)
		<-b.release
		c.JSON(http.StatusOK, gin.H{"ok": true, "data": gin.H{"slow": true}})
	})
	return r
}

// muxApp is the team's net/http app: POST /orders/{id} behind the
// middleware.
func (b *mwBundle) muxApp(opts middleware.Options) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{id}", middleware.Idempotent(opts)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.runs.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Location", "/orders/"+r.PathValue("id"))
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"ok":true,"data":{"id":"` + r.PathValue("id") + `","echo":` + string(body) + `,"n":1}}`))
	})))
	return mux
}

func mwDo(h http.Handler, method, path, tenant, key, body string, headers ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if tenant != "" {
		r.Header.Set("X-Tenant", tenant)
	}
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Set(headers[i], headers[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestIdempotentGinReplays(t *testing.T) {
	t.Parallel()
	b := mwSetup(t)
	first := mwDo(b.gin, http.MethodPost, "/orders/7", "acme", "k1", `{"qty":2}`)
	require.Equal(t, http.StatusCreated, first.Code, first.Body.String())
	require.JSONEq(t, `{"ok":true,"stopReason":"completed","needsHuman":false,"cached":false,"data":{"id":"7","qty":2}}`, first.Body.String())
	require.Equal(t, "/orders/7", first.Header().Get("Location"))
	require.Equal(t, "application/json", first.Header().Get("Content-Type"))
	require.Empty(t, first.Header().Get("X-Not-Replayed"), "only status, body, Content-Type and Location are answered")
	require.Empty(t, first.Header().Get("Idempotent-Replayed"))

	again := mwDo(b.gin, http.MethodPost, "/orders/7", "acme", "k1", `{"qty":2}`)
	require.Equal(t, http.StatusCreated, again.Code)
	require.Equal(t, strings.Replace(first.Body.String(), `"cached":false`, `"cached":true`, 1), again.Body.String())
	require.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
	require.NotEmpty(t, again.Header().Get("Idempotent-Completed-At"))
	require.Equal(t, "/orders/7", again.Header().Get("Location"))
	require.EqualValues(t, 1, b.runs.Load())

	other := mwDo(b.gin, http.MethodPost, "/orders/7", "acme", "k1", `{"qty":3}`)
	require.Equal(t, http.StatusUnprocessableEntity, other.Code)
	require.Equal(t, ProblemTypePrefix+"idempotency-key-reused", problemOf(t, other)["type"])

	otherTenant := mwDo(b.gin, http.MethodPost, "/orders/7", "beta", "k1", `{"qty":2}`)
	require.Equal(t, http.StatusCreated, otherTenant.Code, "keys are per tenant")
	require.EqualValues(t, 2, b.runs.Load())

	// The scope is the route; the row is there under it.
	key, err := b.guard.Key("acme", "POST:orders.:id", "k1")
	require.NoError(t, err)
	info, err := b.guard.Lookup(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, store.RowSucceeded, info.Status)
	require.Equal(t, http.StatusCreated, info.StatusCode)
}

// Without a key, the key derives from the method, path, query and body.
func TestIdempotentDerivedKey(t *testing.T) {
	t.Parallel()
	b := mwSetup(t)
	require.Equal(t, http.StatusCreated, mwDo(b.gin, http.MethodPost, "/orders/1", "acme", "", `{"qty":1}`).Code)
	w := mwDo(b.gin, http.MethodPost, "/orders/1", "acme", "", `{ "qty": 1 }`)
	require.Equal(t, "true", w.Header().Get("Idempotent-Replayed"), "the same JSON, written differently")
	require.EqualValues(t, 1, b.runs.Load())
	require.Equal(t, "", mwDo(b.gin, http.MethodPost, "/orders/2", "acme", "", `{"qty":1}`).Header().Get("Idempotent-Replayed"))
	require.Equal(t, "", mwDo(b.gin, http.MethodPost, "/orders/1?x=1", "acme", "", `{"qty":1}`).Header().Get("Idempotent-Replayed"))
	require.EqualValues(t, 3, b.runs.Load())
}

func TestIdempotentConcurrentRunsOnce(t *testing.T) {
	t.Parallel()
	b := mwSetup(t)
	const n = 20
	var wg sync.WaitGroup
	codes := make([]int, n)
	bodies := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := mwDo(b.gin, http.MethodPost, "/slow", "acme", "same", `{}`, "Prefer", "wait=10")
			codes[i], bodies[i] = w.Code, w.Body.String()
		}()
	}
	require.Eventually(t, func() bool { return b.runs.Load() == 1 }, 5e9, 1e6)
	close(b.release)
	wg.Wait()
	require.EqualValues(t, 1, b.runs.Load())
	for i := range n {
		require.Equal(t, http.StatusOK, codes[i], bodies[i])
		require.Contains(t, bodies[i], `"data":{"slow":true}`)
	}
}

// A handler that writes something no replay could reproduce is a 500 at
// request time; a failing handler's own answer reaches its caller, is not
// stored, and the next call runs the handler again.
func TestIdempotentHandlerMistakes(t *testing.T) {
	t.Parallel()
	b := mwSetup(t)
	for path, want := range map[string]string{
		"/text":   `the handler wrote Content-Type "text/plain; charset=utf-8"`,
		"/stream": "the handler called Flush (streaming)",
		"/array":  "the handler wrote a JSON array, not an object",
	} {
		w := mwDo(b.gin, http.MethodPost, path, "acme", "k", `{}`)
		require.Equal(t, http.StatusInternalServerError, w.Code, path)
		p := problemOf(t, w)
		require.Equal(t, ProblemTypePrefix+"invalid-result", p["type"], path)
		require.Contains(t, p["detail"], want, path)
		require.NotContains(t, w.Body.String(), "plain text")
	}

	w := mwDo(b.gin, http.MethodPost, "/upstream", "acme", "u", `{}`)
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	require.JSONEq(t, `{"error":"down"}`, w.Body.String())
	w = mwDo(b.gin, http.MethodPost, "/upstream", "acme", "u", `{}`)
	require.Equal(t, http.StatusOK, w.Code, "a failed handler runs again with the same key")
}

func TestIdempotentRejectsBeforeRunning(t *testing.T) {
	t.Parallel()
	b := mwSetup(t)
	for name, tc := range map[string]struct {
		tenant, key, body string
		code              int
	}{
		"no tenant":    {"", "k", `{}`, http.StatusUnauthorized},
		"bad tenant":   {"a b", "k", `{}`, http.StatusUnauthorized},
		"bad key":      {"acme", "a b", `{}`, http.StatusBadRequest},
		"bad JSON":     {"acme", "k", `{`, http.StatusBadRequest},
		"body too big": {"acme", "k", `{"x":"` + strings.Repeat("a", DefaultMaxBodyBytes) + `"}`, http.StatusRequestEntityTooLarge},
	} {
		w := mwDo(b.gin, http.MethodPost, "/orders/1", tc.tenant, tc.key, tc.body)
		require.Equal(t, tc.code, w.Code, name)
		require.Equal(t, pipeline.ContentProblem, w.Header().Get("Content-Type"), name)
	}
	require.Zero(t, b.runs.Load())
}

func TestIdempotentHTTPServeMux(t *testing.T) {
	t.Parallel()
	b := mwSetup(t)
	first := mwDo(b.mux, http.MethodPost, "/orders/9", "acme", "k1", `{"a":1}`)
	require.Equal(t, http.StatusCreated, first.Code, first.Body.String())
	require.Equal(t, "/orders/9", first.Header().Get("Location"))
	var env map[string]any
	require.NoError(t, json.Unmarshal(first.Body.Bytes(), &env))
	require.Equal(t, map[string]any{"id": "9", "n": float64(1)}, env["data"], "a nested object (echo) is dropped")
	require.NotContains(t, first.Body.String(), "$location")

	again := mwDo(b.mux, http.MethodPost, "/orders/9", "acme", "k1", `{"a":1}`)
	require.Equal(t, http.StatusCreated, again.Code)
	require.Equal(t, "true", again.Header().Get("Idempotent-Replayed"))
	require.Equal(t, strings.Replace(first.Body.String(), `"cached":false`, `"cached":true`, 1), again.Body.String())
	require.EqualValues(t, 1, b.runs.Load())
	require.Contains(t, b.logs.String(), `"field":"data.echo"`, "the dropped field is logged by name")

	key, err := b.guard.Key("acme", "POST:orders._id_", "k1")
	require.NoError(t, err)
	_, err = b.guard.Lookup(context.Background(), key)
	require.NoError(t, err, "the scope comes from the ServeMux pattern")
}

func TestIdempotentOptions(t *testing.T) {
	t.Parallel()
	require.PanicsWithError(t, "middleware: Options.Guard is required", func() { Idempotent(middleware.Options{}) })
	require.ErrorContains(t, middleware.Options{Guard: &idemguard.Guard{}, Scope: "a b"}.Validate(), "Options.Scope")
}

// A handler's 401, 403, 408 and 409 are not the answer to the inputs (they
// depend on credentials, timing or state): each is a retryable failure, like
// 429 and 5xx, never stored as success and replayed for the TTL.
func TestIdempotentRetryableHandlerStatuses(t *testing.T) {
	t.Parallel()
	g, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: testSecret})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
	opts := middleware.Options{Guard: g, Tenant: func(r *http.Request) (tenancy.ID, error) { return "acme", nil }}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	var runs atomic.Int32
	r.POST("/op/:code", Idempotent(opts), func(c *gin.Context) {
		if runs.Add(1)%2 == 1 {
			code, _ := strconv.Atoi(c.Param("code"))
			if code >= 500 {
				c.Header("Retry-After", "7")
				c.String(code, "upstream down") // not JSON: not stored, so allowed
				return
			}
			c.JSON(code, gin.H{"ok": false, "why": "state of the moment"})
			return
		}
		c.JSON(http.StatusCreated, gin.H{"ok": true})
	})
	for _, code := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestTimeout, http.StatusConflict,
		http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable} {
		path := "/op/" + strconv.Itoa(code)
		first := mwDo(r, http.MethodPost, path, "acme", "k-"+strconv.Itoa(code), `{}`)
		// The caller whose call ran the handler gets the handler's own answer, as written.
		require.Equal(t, code, first.Code, "%d: %s", code, first.Body.String())
		require.Empty(t, first.Header().Get("Idempotent-Replayed"))
		if code >= 500 {
			require.Equal(t, "upstream down", first.Body.String())
			require.Equal(t, "7", first.Header().Get("Retry-After"))
		} else {
			require.JSONEq(t, `{"ok":false,"why":"state of the moment"}`, first.Body.String())
		}
		// It was not stored as the answer: the next call runs the handler again.
		again := mwDo(r, http.MethodPost, path, "acme", "k-"+strconv.Itoa(code), `{}`)
		require.Equal(t, http.StatusCreated, again.Code, "%d was stored and replayed: %s", code, again.Body.String())
	}
	require.EqualValues(t, 14, runs.Load())
}

// Only the headers a handler set, and only those kept, are sent: a body
// naming data.$location sets no Location, and Set-Cookie (not named) never
// reaches a caller, first or replayed.
func TestIdempotentSendsOnlyTheHeadersItKeeps(t *testing.T) {
	t.Parallel()
	b := mwSetup(t)
	for range 2 {
		w := mwDo(b.gin, http.MethodPost, "/dollar", "acme", "k1", `{}`)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		require.Empty(t, w.Header().Get("Location"))
		require.Empty(t, w.Header().Get("Set-Cookie"))
	}
	require.EqualValues(t, 1, b.runs.Load())
}

// Over the guard's MaxWaiters a duplicate with Prefer: wait is refused at
// once with 429 too-many-waiters, whose detail tells the client to retry
// after Retry-After seconds: the answer carries Retry-After on both doors,
// as the REST API's does.
func TestIdempotentTooManyWaitersCarriesRetryAfter(t *testing.T) {
	t.Parallel()
	g, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: testSecret, MaxWaiters: 1,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
	started, release := make(chan struct{}, 4), make(chan struct{})
	t.Cleanup(func() { close(release) }) // before the guard closes, on failure too
	slow := func() { started <- struct{}{}; <-release }
	opts := middleware.Options{Guard: g, Scope: "slow", RetryAfter: 3 * time.Second, Tenant: func(r *http.Request) (tenancy.ID, error) {
		return tenancy.ParseID(r.Header.Get("X-Tenant"))
	}}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.POST("/slow", Idempotent(opts), func(c *gin.Context) { slow(); c.JSON(http.StatusOK, gin.H{"ok": true}) })
	mux := http.NewServeMux()
	mux.Handle("POST /slow", middleware.Idempotent(opts)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		slow()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	})))
	for door, h := range map[string]http.Handler{"gin": r, "net/http": mux} {
		key := "waiters-" + strings.ReplaceAll(door, "/", "")
		var wg sync.WaitGroup
		wg.Go(func() { mwDo(h, http.MethodPost, "/slow", "acme", key, `{}`) })
		<-started
		answers := make(chan *httptest.ResponseRecorder, 2)
		for range 2 {
			wg.Go(func() { answers <- mwDo(h, http.MethodPost, "/slow", "acme", key, `{}`, "Prefer", "wait=20") })
		}
		select {
		case w := <-answers:
			require.Equal(t, http.StatusTooManyRequests, w.Code, door)
			require.Contains(t, w.Body.String(), "too-many-waiters", door)
			require.Equal(t, "3", w.Header().Get("Retry-After"), door)
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: no waiter was refused", door)
		}
		release <- struct{}{}
		wg.Wait()
	}
}
