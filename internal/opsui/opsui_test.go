package opsui_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/opsui"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/routers"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The policy allows exactly the inline script the page carries: a change to page.js that is not
// reflected in the hash would leave the page blank in every browser.
func TestPagePolicyAllowsItsScript(t *testing.T) {
	t.Parallel()
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		w := httptest.NewRecorder()
		opsui.Handler().ServeHTTP(w, httptest.NewRequest(method, "/ops", nil))
		require.Equal(t, http.StatusOK, w.Code)
		require.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"))
		if method == http.MethodHead {
			require.Zero(t, w.Body.Len())
			continue
		}
		require.Contains(t, w.Body.String(), `fetch("v1/stats?since=`, "the page fetches the figures relative to its own prefix")
		require.NotContains(t, w.Body.String(), "<!--script-->")
		scripts := regexp.MustCompile(`(?s)<script>(.*?)</script>`).FindAllStringSubmatch(w.Body.String(), -1)
		require.Len(t, scripts, 1)
		sum := sha256.Sum256([]byte(scripts[0][1]))
		require.Contains(t, w.Header().Get("Content-Security-Policy"),
			"script-src 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
	}
}

func TestMySQLWindowScopesAndTenant(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := db.DB.Exec(q, args...)
		require.NoError(t, err)
	}
	bucket := func(ago string) string {
		return "DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL " + ago + ", '%Y-%m-%d %H:00:00')"
	}
	exec(`INSERT INTO idempotency_stats (bucket_start, scope, requests, replays, in_progress, updated_at) VALUES
		(` + bucket("1 HOUR") + `, 'chat', 10, 4, 2, UTC_TIMESTAMP(6)),
		(` + bucket("1 HOUR") + `, 'gone', 7, 7, 0, UTC_TIMESTAMP(6)),
		(` + bucket("5 HOUR") + `, 'chat', 3, 0, 0, UTC_TIMESTAMP(6))`)
	key := func(tenant, hash, status string, ago string) {
		exec(`INSERT INTO idempotency_keys (tenant, scope, key_hash, request_fingerprint, status, claim_nonce,
			created_at, started_at, expires_at) VALUES (?, 'chat', ?, REPEAT('f', 64), ?, 'n',
			UTC_TIMESTAMP(6) - INTERVAL `+ago+`, UTC_TIMESTAMP(6) - INTERVAL `+ago+`, UTC_TIMESTAMP(6) + INTERVAL 1 DAY)`,
			tenant, hash, status)
	}
	key("acme", "a1", "succeeded", "30 MINUTE")
	key("acme", "a2", "failed", "30 MINUTE")
	key("acme", "a3", "started", "3 HOUR")
	key("beta", "b1", "succeeded", "30 MINUTE")

	src := opsui.NewMySQL(db.DB, []string{"chat"})
	st, err := src.OperatorStats(context.Background(), "acme", 2*time.Hour)
	require.NoError(t, err)
	require.Equal(t, "mysql", st.Store)
	require.Equal(t, int64(7200), st.SinceSeconds)
	require.Len(t, st.Scopes, 1, "the window leaves out the 5-hour-old bucket, the scope list the unserved one")
	require.Equal(t, int64(10), st.Scopes[0].Requests)
	require.Equal(t, int64(4), st.Scopes[0].Replays)
	require.Equal(t, int64(2), st.Scopes[0].InProgress)
	hour, err := time.Parse(time.RFC3339, st.Scopes[0].Hour)
	require.NoError(t, err)
	require.Zero(t, hour.Minute(), "buckets are whole hours")
	require.Len(t, st.Keys, 1, "acme's keys of the window, in one hour; not beta's, not the 3-hour-old one")
	require.Equal(t, routers.KeyHour{Hour: st.Keys[0].Hour, Scope: "chat", Created: 2, Succeeded: 1, Failed: 1}, st.Keys[0])

	st, err = src.OperatorStats(context.Background(), "acme", 24*time.Hour)
	require.NoError(t, err)
	require.Len(t, st.Scopes, 2)
	var created int64
	for _, k := range st.Keys {
		created += k.Created
	}
	require.Equal(t, int64(3), created)

	st, err = src.OperatorStats(context.Background(), "nobody", time.Hour)
	require.NoError(t, err)
	require.Empty(t, st.Keys)
	require.NotNil(t, st.Keys, "an empty list, never null")

	// A tenant's own answer (the API's /v1/stats) holds its keys and none of the service-wide
	// counters: on the code before, it held the counters of every tenant's calls (chat: 10
	// requests, 4 replays).
	st, err = src.Stats(context.Background(), "acme", 24*time.Hour)
	require.NoError(t, err)
	require.Empty(t, st.Scopes, "the service-wide counters are the operator's")
	require.NotNil(t, st.Scopes)
	require.Equal(t, opsui.NoteMySQL, st.Note)
	created = 0
	for _, k := range st.Keys {
		created += k.Created
	}
	require.Equal(t, int64(3), created)

	// The operator listener's handler answers the same figures without a credential.
	h := opsui.Operator(opsui.OperatorOptions{Metrics: http.NotFoundHandler(), Stats: src})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/stats?since=24h&tenant=beta", nil))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var op routers.Stats
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &op))
	require.Equal(t, "beta", op.Tenant)
	require.Len(t, op.Scopes, 2)
	require.Len(t, op.Keys, 1)
	require.Equal(t, opsui.NoteOperator, op.Note)
}

// The operator listener serves /metrics, the page and the figures, asks for no credential, sends
// no CORS headers (a browser page of another origin cannot read it), and nothing else.
func TestOperatorHandler(t *testing.T) {
	t.Parallel()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("idemguard_up 1\n")) })
	h := opsui.Operator(opsui.OperatorOptions{Metrics: metrics})
	get := func(path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header.Set("Origin", "https://app.example.com")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.Empty(t, w.Header().Get("Access-Control-Allow-Origin"), path)
		return w
	}
	require.Equal(t, "idemguard_up 1\n", get("/metrics").Body.String())
	require.Contains(t, get("/ops").Body.String(), "idemguard · operations")
	w := get("/v1/stats")
	require.Equal(t, http.StatusOK, w.Code)
	var st routers.Stats
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &st))
	require.Equal(t, routers.NoteNoHistory, st.Note)
	require.Equal(t, http.StatusBadRequest, get("/v1/stats?since=1s").Code)
	require.Equal(t, http.StatusBadRequest, get("/v1/stats?tenant=a%20b").Code)
	require.Equal(t, http.StatusNotFound, get("/v1/ops/chat").Code)
	r := httptest.NewRequest(http.MethodPost, "/metrics", nil)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	require.Equal(t, http.StatusMethodNotAllowed, w.Code)
}

func TestMySQLErrorIsStoreUnavailable(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	src := opsui.NewMySQL(db.DB, []string{"chat"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := src.Stats(ctx, "acme", time.Hour)
	require.Error(t, err)
	require.True(t, errors.Is(err, idemguard.ErrStoreUnavailable), "%v", err)
}
