package routers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/testlog"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
	"github.com/idemguard/idemguard/tenancy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testSecret = []byte("routers-test-secret-0123456789abcdef")

// API keys of the test tenants. acme has two (rotation).
const (
	acmeKey1 = "acme-key-one-0001"
	acmeKey2 = "acme-key-two-0002"
	betaKey  = "beta-key-one-0001"
)

// testBundle is one API over a memstore guard, with fake scopes that count
// their calls.
type testBundle struct {
	t       *testing.T
	store   *memstore.Store
	guard   *idemguard.Guard
	handler http.Handler
	opts    Options
	logs    *testlog.Buffer
	calls   map[string]*atomic.Int32
	gets    atomic.Int32  // Store.Get calls the guard made
	release chan struct{} // closed (releaseNow) to let the "slow" scope finish
	once    sync.Once
	started chan struct{} // one value each time "slow" starts
}

type setupOpts struct {
	options func(*Options)
	guard   func(*idemguard.Config)
}

func setup(t *testing.T, so ...setupOpts) *testBundle {
	t.Helper()
	b := &testBundle{
		t:       t,
		store:   memstore.New(),
		logs:    &testlog.Buffer{},
		calls:   map[string]*atomic.Int32{},
		release: make(chan struct{}),
		started: make(chan struct{}, 16),
	}
	logger := slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := idemguard.Config{Store: &countingStore{Store: b.store, gets: &b.gets},
		Secret: testSecret, Logger: logger}
	for _, o := range so {
		if o.guard != nil {
			o.guard(&cfg)
		}
	}
	g, err := idemguard.New(cfg)
	require.NoError(t, err)
	b.guard = g
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, g.Close(ctx))
	})

	t.Cleanup(b.releaseNow) // runs before the guard closes

	auth, err := auth.NewAuthenticator(map[tenancy.ID][]string{
		"acme": {auth.HashAPIKey(acmeKey1), auth.HashAPIKey(acmeKey2)},
		"beta": {auth.HashAPIKey(betaKey)},
	})
	require.NoError(t, err)
	opts := Options{Guard: g, Scopes: b.scopes(), Auth: auth, Logger: logger}
	for _, o := range so {
		if o.options != nil {
			o.options(&opts)
		}
	}
	// The OpenAI and Anthropic doors on echo, where the test's options leave it and no door.
	if opts.Doors == nil && slices.ContainsFunc(opts.Scopes, func(s Scope) bool { return s.Name == "echo" }) {
		opts.Doors = []Door{{Wire: WireOpenAI, Prefix: "/openai/v1", Scope: "echo"}, {Wire: WireAnthropic, Prefix: "/anthropic/v1", Scope: "echo"}}
	}
	b.opts = opts
	b.handler, err = New(opts)
	require.NoError(t, err)
	return b
}

// countingStore counts the reads of the guard, to see a waiter polling.
type countingStore struct {
	*memstore.Store
	gets *atomic.Int32
}

func (s *countingStore) Get(ctx context.Context, tenant, scope, keyHash string) (store.Record, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, tenant, scope, keyHash)
}

// releaseNow lets every "slow" operation finish; it may be called twice.
func (b *testBundle) releaseNow() { b.once.Do(func() { close(b.release) }) }

func (b *testBundle) counter(name string) *atomic.Int32 {
	c := &atomic.Int32{}
	b.calls[name] = c
	return c
}

// echoResult is what the echo-like scopes answer: the inputs' "n" and text
// that JSON encoders escape differently (<, >, &, é).
func echoResult(inputs json.RawMessage) (any, error) {
	var in struct {
		N json.Number `json:"n"`
	}
	if err := json.Unmarshal(inputs, &in); err != nil {
		return nil, err
	}
	return map[string]any{
		"ok": true, "traceId": "trace-1", "createdActionRequestIds": []int64{7, 8},
		"data":   map[string]any{"n": in.N, "text": "<b>café</b> & co", "prompt": "never stored"},
		"prompt": "never stored either",
	}, nil
}

var errUpstream = errors.New("upstream said 500: secret-upstream-detail")

func (b *testBundle) scopes() []Scope {
	echo, strict, slow := b.counter("echo"), b.counter("strict"), b.counter("slow")
	flaky, broken, created := b.counter("flaky"), b.counter("broken"), b.counter("created")
	timeout, invalid := b.counter("timeout"), b.counter("invalid")
	return []Scope{
		// invalid returns a string (a bug) on its first call.
		{Name: "invalid", Run: func(_ context.Context, in json.RawMessage) (any, error) {
			if invalid.Add(1) == 1 {
				return "a plain string", nil
			}
			return echoResult(in)
		}},
		{Name: "echo", Run: func(_ context.Context, in json.RawMessage) (any, error) {
			echo.Add(1)
			return echoResult(in)
		}},
		{Name: "actionRequests.aiProposeCopy", KeyRequired: true, Run: func(_ context.Context, in json.RawMessage) (any, error) {
			strict.Add(1)
			return echoResult(in)
		}},
		{Name: "slow", Run: func(ctx context.Context, in json.RawMessage) (any, error) {
			slow.Add(1)
			b.started <- struct{}{}
			select {
			case <-b.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return echoResult(in)
		}},
		// flaky fails its first call, then succeeds.
		{Name: "flaky", Run: func(_ context.Context, in json.RawMessage) (any, error) {
			if flaky.Add(1) == 1 {
				return nil, errUpstream
			}
			return echoResult(in)
		}},
		{Name: "broken", Settings: idemguard.Settings{MaxAttempts: 2}, Run: func(context.Context, json.RawMessage) (any, error) {
			broken.Add(1)
			return nil, errUpstream
		}},
		{Name: "created", Run: func(context.Context, json.RawMessage) (any, error) {
			created.Add(1)
			return idemguard.Response{StatusCode: http.StatusCreated, Value: map[string]any{"ok": true, "data": map[string]any{"id": 42}}}, nil
		}},
		{Name: "timeout", Timeout: 20 * time.Millisecond, Run: func(ctx context.Context, _ json.RawMessage) (any, error) {
			timeout.Add(1)
			<-ctx.Done()
			return nil, ctx.Err()
		}},
	}
}

func (b *testBundle) totalCalls() int32 {
	var n int32
	for _, c := range b.calls {
		n += c.Load()
	}
	return n
}

// req describes one request; headers are name, value pairs.
type req struct {
	method, path, body string
	apiKey             string // "" for none
	headers            []string
}

func (b *testBundle) do(r req) *httptest.ResponseRecorder {
	b.t.Helper()
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr := httptest.NewRequest(r.method, r.path, body)
	if r.apiKey != "" {
		hr.Header.Set("Authorization", "Bearer "+r.apiKey)
	}
	for i := 0; i+1 < len(r.headers); i += 2 {
		hr.Header.Add(r.headers[i], r.headers[i+1])
	}
	w := httptest.NewRecorder()
	b.handler.ServeHTTP(w, hr)
	return w
}

// post is a POST to /v1/ops/{scope} as acme with the given key ("" for none).
func (b *testBundle) post(scope, key, body string, headers ...string) *httptest.ResponseRecorder {
	b.t.Helper()
	if key != "" {
		headers = append(headers, "Idempotency-Key", key)
	}
	return b.do(req{method: http.MethodPost, path: "/v1/ops/" + scope, body: body, apiKey: acmeKey1, headers: headers})
}

// problemOf decodes a problem answer and checks its invariant parts.
func problemOf(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"), w.Body.String())
	var p map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
	require.Equal(t, false, p["ok"])
	require.EqualValues(t, w.Code, p["status"])
	require.True(t, strings.HasPrefix(p["type"].(string), ProblemTypePrefix), p["type"])
	require.NotEmpty(t, p["title"])
	return p
}

// asFresh turns a replayed body into the fresh one it must equal.
func asFresh(body []byte) []byte {
	return bytes.Replace(body, []byte(`"cached":true`), []byte(`"cached":false`), 1)
}
