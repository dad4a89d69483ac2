package routers

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/testlog"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/routers/auth/authtest"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/routers/middleware"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/memstore"
	"github.com/idemguard/idemguard/tenancy"
)

// Canaries: none of them may ever appear in an audit event, a history
// answer or a log line.
const (
	canaryAPIKey    = "CANARY-api-key-secret-7f3a9c"
	canaryClientKey = "CANARY-client-key-5e1b"
	canaryPrompt    = "CANARY prompt: my card is 4111 1111 1111 1111"
)

// auditBundle is the test API with auditing on: the trail is written to the
// memory store (Config.Audit.Store) and every event is also observed, as
// serve's stream writer observes it, into stream (one JSON line each).
// acme's canaryAPIKey is named "billing", acmeKey1 is unnamed.
type auditBundle struct {
	*testBundle
	mu     sync.Mutex
	stream strings.Builder
	actors chan string // what the "actor" scope found in its context
}

func auditSetup(t *testing.T, jwtKeys ...authtest.Key) *auditBundle {
	t.Helper()
	ab := &auditBundle{actors: make(chan string, 16)}
	var v *auth.JWTVerifier
	if len(jwtKeys) > 0 {
		idp := authtest.NewIDP(t, jwtKeys...)
		var err error
		v, err = auth.NewJWTVerifier(auth.JWTConfig{
			JWKSURL: idp.URL, Issuer: authtest.Issuer, Audience: authtest.Audience, UnknownKIDInterval: time.Hour,
		})
		require.NoError(t, err)
		t.Cleanup(v.Close)
	}
	ab.testBundle = setup(t, setupOpts{
		guard: func(c *idemguard.Config) {
			c.Audit = idemguard.AuditConfig{Store: true, Observe: true}
			c.Observe = func(ev idemguard.Event) {
				if ev.Kind != idemguard.EventAudit {
					return
				}
				line, err := json.Marshal(ev.Audit)
				if err != nil {
					panic(err)
				}
				ab.mu.Lock()
				defer ab.mu.Unlock()
				ab.stream.Write(append(line, '\n'))
			}
		},
		options: func(o *Options) {
			a, err := auth.NewAuthenticator(map[tenancy.ID][]string{
				"acme": {"billing=" + auth.HashAPIKey(canaryAPIKey), auth.HashAPIKey(acmeKey1)},
				"beta": {auth.HashAPIKey(betaKey)},
			})
			require.NoError(t, err)
			o.Auth = a
			o.JWT = v
			if v != nil {
				o.ScopeAuth = map[string][]auth.Method{"actor": {auth.MethodAPIKey, auth.MethodJWT}}
			}
			o.Scopes = append(o.Scopes, Scope{Name: "actor", Run: func(ctx context.Context, in json.RawMessage) (any, error) {
				ab.actors <- idemguard.ActorFrom(ctx)
				return echoResult(in)
			}})
		},
	})
	return ab
}

func (ab *auditBundle) streamText() string {
	ab.mu.Lock()
	defer ab.mu.Unlock()
	return ab.stream.String()
}

// streamEvents decodes the observed stream, failing on a line that is not
// one JSON object.
func (ab *auditBundle) streamEvents(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(ab.streamText()))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "stream line %q", sc.Text())
		out = append(out, m)
	}
	return out
}

// history GETs a key's history and decodes a 200.
func (b *testBundle) history(t *testing.T, scope, ref, apiKey string) (*httptest.ResponseRecorder, []map[string]any) {
	t.Helper()
	w := b.do(req{method: http.MethodGet, path: "/v1/ops/" + scope + "/keys/" + ref + "/history", apiKey: apiKey})
	if w.Code != http.StatusOK {
		return w, nil
	}
	require.Equal(t, pipeline.ContentJSON, w.Header().Get("Content-Type"))
	var ans struct {
		Events []map[string]any `json:"events"`
	}
	dec := json.NewDecoder(strings.NewReader(w.Body.String()))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&ans), w.Body.String())
	require.NotNil(t, ans.Events)
	return w, ans.Events
}

func kinds(events []map[string]any) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i], _ = e["kind"].(string)
	}
	return out
}

// trailPreviousSecret is the secret TestKeyHistoryOfSeededTrail's guard used
// before its current one.
const trailPreviousSecret = "routers-previous-secret-0123456789ab"

// TestKeyHistoryOfSeededTrail: the route answers the store's events of the
// key, oldest first, as AuditEvent's JSON (the key as its prefix only),
// found by client key (under the current and a previous secret) and by
// ~hash; another tenant's key and an unknown key are the same 404.
func TestKeyHistoryOfSeededTrail(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{guard: func(c *idemguard.Config) {
		c.PreviousSecrets = []idemguard.SecretVersion{{ID: "old", Secret: []byte(trailPreviousSecret)}}
		c.SecretID = "new"
	}})
	hashes := seedTrail(t, b)

	w, events := b.history(t, "echo", "seeded-1", acmeKey1)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, []string{"claimed", "replay", "replay"}, kinds(events))
	require.Equal(t, strings.Repeat("1", 32), events[0]["id"])
	require.Equal(t, hashes[1][:store.KeyPrefixLen], events[0]["keyPrefix"])
	require.Equal(t, hashes[0][:store.KeyPrefixLen], events[1]["keyPrefix"])
	require.Equal(t, "key:billing", events[0]["actor"])
	require.NotContains(t, events[2], "actor", "an unknown actor is absent, not empty")
	require.EqualValues(t, 1, events[1]["replay"])
	require.EqualValues(t, 2, events[2]["replay"])
	require.Equal(t, "2026-01-02T03:04:06Z", events[1]["originalAt"])
	for _, h := range hashes {
		require.NotContains(t, w.Body.String(), h, "the full key hash left the service")
	}
	require.NotContains(t, w.Body.String(), "seeded-1", "the client key left the service")

	// By hash: that hash's events only.
	w, byHash := b.history(t, "echo", "~"+hashes[0], acmeKey1)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, []string{"replay", "replay"}, kinds(byHash))

	// Another tenant's key looks exactly like an unknown one: 404, never 403.
	unknown, _ := b.history(t, "echo", "never-used", betaKey)
	require.Equal(t, http.StatusNotFound, unknown.Code)
	require.Equal(t, ProblemTypePrefix+"key-not-found", problemOf(t, unknown)["type"])
	for _, ref := range []string{"seeded-1", "~" + hashes[0], "~" + hashes[1]} {
		w, _ := b.history(t, "echo", ref, betaKey)
		require.Equal(t, http.StatusNotFound, w.Code, ref)
		require.Equal(t, unknown.Body.String(), w.Body.String(), "another tenant's key must look unknown")
	}

	b.requireProblems(t, map[string]problemCase{
		"unknown scope":  {"/v1/ops/nope/keys/seeded-1/history", acmeKey1, 404, "unknown-scope"},
		"bad client key": {"/v1/ops/echo/keys/a%20b/history", acmeKey1, 400, "invalid-key-reference"},
		"short hash":     {"/v1/ops/echo/keys/~abc/history", acmeKey1, 400, "invalid-key-reference"},
		"no credentials": {"/v1/ops/echo/keys/seeded-1/history", "", 401, "unauthorized"},
		"wrong key":      {"/v1/ops/echo/keys/seeded-1/history", "not-a-key", 401, "unauthorized"},
	})
	w = b.do(req{method: http.MethodPost, path: "/v1/ops/echo/keys/seeded-1/history", apiKey: acmeKey1})
	require.Equal(t, http.StatusMethodNotAllowed, w.Code)
}

// seedTrail writes the audit events of TestKeyHistoryOfSeededTrail to b's
// store: the key "seeded-1" of acme's scope echo under the current secret
// (hashes[0]) and the previous one (hashes[1]), out of order, and events of
// other scopes, tenants and keys. b's guard lists trailPreviousSecret among
// its previous secrets.
func seedTrail(t *testing.T, b *testBundle) (hashes []string) {
	t.Helper()
	// The key's hash under the current secret, then under the previous one
	// (what a guard that still claims under the previous secret derives).
	cur, err := b.guard.Key("acme", "echo", "seeded-1")
	require.NoError(t, err)
	oldGuard, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: []byte(trailPreviousSecret)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = oldGuard.Close(context.Background()) })
	old, err := oldGuard.Key("acme", "echo", "seeded-1")
	require.NoError(t, err)
	hashes = []string{cur.Hash(), old.Hash()}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	seed := []store.AuditEvent{
		// Written out of order: the answer is oldest first.
		{ID: strings.Repeat("2", 32), Kind: store.AuditReplay, At: t0.Add(2 * time.Second), Tenant: "acme", Scope: "echo",
			KeyHash: hashes[0], Attempt: 1, Actor: "key:billing", OriginalAt: t0.Add(time.Second)},
		{ID: strings.Repeat("1", 32), Kind: store.AuditClaimed, At: t0, Tenant: "acme", Scope: "echo",
			KeyHash: hashes[1], Attempt: 1, Actor: "key:billing"}, // made under the previous secret
		{ID: strings.Repeat("3", 32), Kind: store.AuditReplay, At: t0.Add(3 * time.Second), Tenant: "acme", Scope: "echo",
			KeyHash: hashes[0], Attempt: 1, OriginalAt: t0.Add(time.Second)},
		// Not this key's: another scope, another tenant, another key.
		{ID: strings.Repeat("4", 32), Kind: store.AuditClaimed, At: t0, Tenant: "acme", Scope: "slow", KeyHash: hashes[0], Attempt: 1},
		{ID: strings.Repeat("5", 32), Kind: store.AuditClaimed, At: t0, Tenant: "beta", Scope: "echo", KeyHash: strings.Repeat("d", 64), Attempt: 1},
		{ID: strings.Repeat("6", 32), Kind: store.AuditClaimed, At: t0, Tenant: "acme", Scope: "echo", KeyHash: strings.Repeat("e", 64), Attempt: 1},
	}
	require.NoError(t, b.store.AppendAudit(context.Background(), seed))
	return hashes
}

// TestKeyHistoryStoreDown: a store that cannot be read is a 503 with
// Retry-After, not a 404 (the events may well exist).
func TestKeyHistoryStoreDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.store.Close())
	w, _ := b.history(t, "echo", "any-key", acmeKey1)
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	require.Equal(t, ProblemTypePrefix+"store-unavailable", problemOf(t, w)["type"])
	require.NotEmpty(t, w.Header().Get("Retry-After"))
}

// TestAuditEventNamesMatchDocument: every name of a history event is a
// property of the document's AuditEvent.
func TestAuditEventNamesMatchDocument(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	props := doc["components"].(yamlMap)["schemas"].(yamlMap)["AuditEvent"].(yamlMap)["properties"].(yamlMap)
	e := store.AuditEvent{ID: strings.Repeat("a", 32), Kind: store.AuditReplay, At: time.Now(), Tenant: "acme",
		Scope: "echo", KeyHash: strings.Repeat("b", 64), Attempt: 2, Actor: "key:x", OriginalAt: time.Now(),
		StopReason: "timeout", Detail: store.InProgressWaited, Replay: 3}
	raw, err := json.Marshal(e)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	require.Len(t, m, 12, "a new field of AuditEvent's JSON: document it")
	for name := range m {
		require.Contains(t, props, name, "the event's %q is not in the document's AuditEvent", name)
	}
	kindsDoc := props["kind"].(yamlMap)["enum"].([]any)
	require.Len(t, kindsDoc, len(store.AuditKinds()))
	for i, k := range store.AuditKinds() {
		require.Equal(t, string(k), kindsDoc[i])
	}
}

// TestAuditActor: the API puts the caller into the request context once,
// at authentication: an API key by its configured name (never the key), a
// JWT by the HMAC of its subject (never the subject).
func TestAuditActor(t *testing.T) {
	t.Parallel()
	key := authtest.EC(t, "ec-1")
	ab := auditSetup(t, key)
	actorOf := func(token, body string) string {
		t.Helper()
		w := ab.do(req{method: http.MethodPost, path: "/v1/ops/actor", body: body, apiKey: token})
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		select {
		case a := <-ab.actors:
			return a
		case <-time.After(10 * time.Second):
			t.Fatal("the operation did not run")
			return ""
		}
	}
	require.Equal(t, "key:billing", actorOf(canaryAPIKey, `{"n":1}`))
	unnamed := actorOf(acmeKey1, `{"n":2}`)
	require.Equal(t, "key:"+auth.HashAPIKey(acmeKey1)[:12], unnamed, "an unnamed key is named by its digest's first 12 hex digits")

	jwtActor := actorOf(key.Sign(t, "acme", func(c jwt.MapClaims) { c["sub"] = "alice@example.com" }), `{"n":3}`)
	require.Equal(t, "jwt:"+ab.guard.HashActor("alice@example.com"), jwtActor)
	require.NotContains(t, jwtActor, "alice")
	require.Regexp(t, `^jwt:h:[0-9a-f]{32}$`, jwtActor)
	other := actorOf(key.Sign(t, "acme", func(c jwt.MapClaims) { c["sub"] = "bob@example.com" }), `{"n":4}`)
	require.NotEqual(t, jwtActor, other, "two subjects, one actor")
	require.Equal(t, jwtActor, actorOf(key.Sign(t, "acme", func(c jwt.MapClaims) { c["sub"] = "alice@example.com" }), `{"n":5}`),
		"one subject, one actor")
	// A token without a subject cannot have keys of its own (the default for
	// JWT callers): refused before anything runs.
	w := ab.do(req{method: http.MethodPost, path: "/v1/ops/actor", body: `{"n":6}`,
		apiKey: key.Sign(t, "acme", func(c jwt.MapClaims) { delete(c, "sub") })})
	require.Equal(t, http.StatusUnauthorized, w.Code, w.Body.String())

	for _, s := range []string{canaryAPIKey, "alice@example.com", auth.HashAPIKey(canaryAPIKey)} {
		require.NotContains(t, ab.logs.String(), s)
	}
}

// TestAuditTrailThroughAPI: a claim and a replay through the REST API are
// claimed then replay, in the key's history and in the observed stream
// (the same events, by id), with the caller's actor; no canary (API key,
// client key, prompt) reaches the stream, the history or the log. This
// needs the engine to emit its events (Config.Audit).
func TestAuditTrailThroughAPI(t *testing.T) {
	t.Parallel()
	ab := auditSetup(t)
	body := `{"n":1,"prompt":"` + canaryPrompt + `"}`
	do := func() *httptest.ResponseRecorder {
		return ab.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: body, apiKey: canaryAPIKey,
			headers: []string{"Idempotency-Key", canaryClientKey}})
	}
	first := do()
	require.Equal(t, http.StatusOK, first.Code, first.Body.String())
	replay := do()
	require.Equal(t, http.StatusOK, replay.Code)
	require.Equal(t, "true", replay.Header().Get("Idempotent-Replayed"))

	// The replay is written in a batch, off the request path: poll.
	var (
		w      *httptest.ResponseRecorder
		events []map[string]any
	)
	deadline := time.Now().Add(10 * time.Second)
	for {
		w, events = ab.history(t, "echo", canaryClientKey, canaryAPIKey)
		if len(events) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, []string{"claimed", "replay"}, kinds(events))
	for _, e := range events {
		require.Equal(t, "key:billing", e["actor"])
		require.Equal(t, "acme", e["tenant"])
		require.EqualValues(t, 1, e["attempt"])
	}
	require.EqualValues(t, 1, events[1]["replay"])

	stream := ab.streamEvents(t)
	ids := map[string]string{}
	for _, e := range stream {
		ids[e["id"].(string)], _ = e["kind"].(string)
	}
	for _, e := range events {
		require.Equal(t, e["kind"], ids[e["id"].(string)], "the history's event %v is not in the stream", e["id"])
	}

	// The beta tenant sees nothing of it.
	other, _ := ab.history(t, "echo", canaryClientKey, betaKey)
	require.Equal(t, http.StatusNotFound, other.Code)

	for _, text := range []string{ab.streamText(), w.Body.String(), ab.logs.String()} {
		for _, canary := range []string{canaryAPIKey, canaryClientKey, canaryPrompt, "CANARY"} {
			require.NotContains(t, text, canary)
		}
	}
}

// TestMiddlewareActor: a team's own route names the caller by its Actor
// option, or else by the actor in the request context.
func TestMiddlewareActor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	seen := make(chan string, 4)
	r.Use(func(c *gin.Context) {
		ctx := tenancy.WithTenant(c.Request.Context(), "acme")
		c.Request = c.Request.WithContext(idemguard.WithActor(ctx, "key:from-auth"))
	})
	handler := func(c *gin.Context) {
		seen <- idemguard.ActorFrom(c.Request.Context())
		c.JSON(http.StatusOK, gin.H{"ok": true})
	}
	r.POST("/own", Idempotent(middleware.Options{Guard: b.guard, Actor: func(r *http.Request) string {
		return "svc:" + r.Header.Get("X-Service")
	}}), handler)
	r.POST("/default", Idempotent(middleware.Options{Guard: b.guard}), handler)
	badLog := &testlog.Buffer{}
	r.POST("/bad", Idempotent(middleware.Options{Guard: b.guard, Logger: slog.New(slog.NewJSONHandler(badLog, nil)),
		Actor: func(*http.Request) string { return strings.Repeat("x", idemguard.MaxActorLen+1) }}), handler)

	for path, want := range map[string]string{"/own": "svc:orders", "/default": "key:from-auth"} {
		hr := httptest.NewRequest(http.MethodPost, path, strings.NewReader(`{}`))
		hr.Header.Set("X-Service", "orders")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, hr)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		require.Equal(t, want, <-seen, path)
	}
	// An actor the audit table could not hold is the team's bug: 500, and
	// the handler does not run.
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/bad", strings.NewReader(`{}`)))
	require.Equal(t, http.StatusInternalServerError, w.Code, w.Body.String())
	require.Empty(t, seen)
	require.Contains(t, badLog.String(), "Options.Actor")
}
