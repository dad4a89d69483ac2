package routers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/tenancy"
)

// fakeStats records what it was asked and answers a fixed row.
type fakeStats struct {
	mu     sync.Mutex
	tenant tenancy.ID
	since  time.Duration
	err    error
}

func (f *fakeStats) Stats(_ context.Context, tenant tenancy.ID, since time.Duration) (Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tenant, f.since = tenant, since
	if f.err != nil {
		return Stats{}, f.err
	}
	return Stats{Tenant: string(tenant), Store: "mysql", SinceSeconds: int64(since / time.Second),
		Scopes: []ScopeHour{{Hour: "2026-01-02T03:00:00Z", Scope: "echo", Requests: 5, Replays: 2}},
		Keys:   []KeyHour{{Hour: "2026-01-02T03:00:00Z", Scope: "echo", Created: 3, Succeeded: 3}}}, nil
}

func getStats(t *testing.T, h http.Handler, query, apiKey string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/v1/stats"+query, nil)
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestStatsAnswersTheCallersTenant(t *testing.T) {
	t.Parallel()
	src := &fakeStats{}
	b := setup(t, setupOpts{options: func(o *Options) { o.Stats = src }})

	w := getStats(t, b.handler, "", betaKey)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, "no-store", w.Header().Get("Cache-Control"))
	var got Stats
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
	require.Equal(t, "beta", got.Tenant)
	require.Equal(t, tenancy.ID("beta"), src.tenant, "the source is asked for the authenticated tenant")
	require.Equal(t, DefaultStatsSince, src.since)
	require.Equal(t, int64(5), got.Scopes[0].Requests)
	require.Contains(t, w.Body.String(), `"inProgress":0`, "camelCase JSON like the rest of the API")

	w = getStats(t, b.handler, "?since=90m", acmeKey1)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, tenancy.ID("acme"), src.tenant)
	require.Equal(t, 90*time.Minute, src.since)
}

func TestStatsRejects(t *testing.T) {
	t.Parallel()
	src := &fakeStats{}
	b := setup(t, setupOpts{options: func(o *Options) { o.Stats = src }})

	w := getStats(t, b.handler, "", "")
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.NotEmpty(t, w.Header().Get("WWW-Authenticate"))
	w = getStats(t, b.handler, "", "not-a-key")
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Empty(t, src.tenant, "the source is never asked without a tenant")

	for _, q := range []string{"?since=", "?since=abc", "?since=30s", "?since=169h", "?since=-1h"} {
		w = getStats(t, b.handler, q, acmeKey1)
		require.Equal(t, http.StatusBadRequest, w.Code, q)
		require.Contains(t, w.Body.String(), "urn:idemguard:problem:invalid-query", q)
	}

	src.err = errors.Join(idemguard.ErrStoreUnavailable, errors.New("dial tcp db.internal:3306: refused"))
	w = getStats(t, b.handler, "", acmeKey1)
	require.Equal(t, http.StatusServiceUnavailable, w.Code)
	require.NotEmpty(t, w.Header().Get("Retry-After"))
	require.NotContains(t, w.Body.String(), "db.internal", "the cause stays in the log")
	require.Contains(t, b.logs.String(), "db.internal")
}

func TestStatsWithoutSourceSaysWhy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := getStats(t, b.handler, "?since=6h", acmeKey1)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var got Stats
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
	require.Equal(t, "memory", got.Store)
	require.Equal(t, NoteNoHistory, got.Note)
	require.Equal(t, int64(6*3600), got.SinceSeconds)
	require.Contains(t, w.Body.String(), `"scopes":[]`, "an empty series, not null")
}

func TestOpsPageMountsUnderThePrefix(t *testing.T) {
	t.Parallel()
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte("<p>the page</p>"))
	})
	b := setup(t, setupOpts{options: func(o *Options) { o.Prefix = "/idempotency"; o.OpsPage = page }})
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		w := httptest.NewRecorder()
		b.handler.ServeHTTP(w, httptest.NewRequest(method, "/idempotency/ops", nil))
		require.Equal(t, http.StatusOK, w.Code, method)
		require.Equal(t, "text/html; charset=utf-8", w.Header().Get("Content-Type"))
	}

	w := getStats(t, b.handler, "", acmeKey1)
	require.Equal(t, http.StatusNotFound, w.Code, "stats live under the prefix too")
	req := httptest.NewRequest(http.MethodGet, "/idempotency/v1/stats", nil)
	req.Header.Set("Authorization", "Bearer "+acmeKey1)
	w = httptest.NewRecorder()
	b.handler.ServeHTTP(w, req)
	require.Equal(t, http.StatusOK, w.Code)
}

func TestOpsPageWithoutHandlerIsNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := httptest.NewRecorder()
	b.handler.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/ops", nil))
	require.Equal(t, http.StatusNotFound, w.Code)
	require.Contains(t, w.Body.String(), "urn:idemguard:problem:unknown-route")
}
