package routers

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/routers/auth/authtest"
)

// Two users of one tenant, each with a JWT: by default (IsolationAuto) each
// has keys of their own. mallory sending alice's body gets a fresh run, not
// alice's answer; alice's Idempotency-Key is a 404 to mallory on every key
// route (lookup, events, history, cancel), and mallory's cancel leaves
// alice's job running. On the code before principals entered the key,
// mallory's POST was a replay of alice's answer (Idempotent-Replayed: true,
// one execution) and her GET of alice's key a 200.
func TestUsersOfOneTenantHaveTheirOwnKeys(t *testing.T) {
	t.Parallel()
	rsaKey := authtest.RSA(t, "rsa-1")
	b := jwtSetup(t, rsaKey)
	b.opts.ScopeAuth["slow"] = []auth.Method{auth.MethodJWT}
	var err error
	b.handler, err = New(b.opts)
	require.NoError(t, err)
	as := func(sub string) string {
		return rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { c["sub"] = sub })
	}
	alice, mallory := as("alice"), as("mallory")

	w := b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: `{"n":1}`, apiKey: alice})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	aliceRef := w.Header().Get("Idempotency-Key-Ref")
	w = b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: `{"n":1}`, apiKey: mallory})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Empty(t, w.Header().Get("Idempotent-Replayed"), "mallory got alice's answer")
	require.NotEqual(t, aliceRef, w.Header().Get("Idempotency-Key-Ref"))
	require.EqualValues(t, 2, b.calls["echo"].Load())
	w = b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: `{"n":1}`, apiKey: alice})
	require.Equal(t, "true", w.Header().Get("Idempotent-Replayed"), "alice's own duplicate is a replay")
	require.Equal(t, aliceRef, w.Header().Get("Idempotency-Key-Ref"), "one key, one reference")

	// alice's derived reference names her key for her only: it is masked for her, so mallory,
	// shown it, reads nothing with it.
	w = b.do(req{method: http.MethodGet, path: "/v1/ops/echo/keys/" + aliceRef, apiKey: alice})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Contains(t, w.Body.String(), `"ref":"`+aliceRef+`"`)
	for _, path := range []string{"/v1/ops/echo/keys/" + aliceRef, "/v1/ops/echo/keys/" + aliceRef + "/history"} {
		w = b.do(req{method: http.MethodGet, path: path, apiKey: mallory})
		require.Equal(t, http.StatusNotFound, w.Code, "%s: %s", path, w.Body.String())
	}
	stored := b.store.Rows()
	for _, r := range stored {
		require.NotEqual(t, aliceRef[1:], r.KeyHash, "the reference is not the stored hash")
		require.NotContains(t, r.KeyHash, "alice")
	}

	otherUserCannotReachJob(t, b, alice, mallory)
	// The same client key from mallory is a key of her own.
	w = b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: `{"n":3}`, apiKey: alice, headers: []string{"Idempotency-Key", "k"}})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	w = b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: `{"n":4}`, apiKey: mallory, headers: []string{"Idempotency-Key", "k"}})
	require.Equal(t, http.StatusOK, w.Code, "another principal's key of the same name is no fingerprint mismatch: %s", w.Body.String())
	b.releaseNow()
}

// otherUserCannotReachJob starts a job of owner's under the client key
// job-1 of the "slow" scope: every key route of it is a 404 to other, and
// other's cancel leaves it running uncancelled.
func otherUserCannotReachJob(t *testing.T, b *testBundle, owner, other string) {
	t.Helper()
	w := b.do(req{method: http.MethodPost, path: "/v1/ops/slow", body: `{"n":2}`, apiKey: owner,
		headers: []string{"Idempotency-Key", "job-1", "Prefer", "respond-async"}})
	require.Equal(t, http.StatusAccepted, w.Code, w.Body.String())
	<-b.started
	for _, r := range []req{
		{method: http.MethodGet, path: "/v1/ops/slow/keys/job-1"},
		{method: http.MethodGet, path: "/v1/ops/slow/keys/job-1/history"},
		{method: http.MethodGet, path: "/v1/ops/slow/keys/job-1/events"},
		{method: http.MethodPost, path: "/v1/ops/slow/keys/job-1/cancel"},
	} {
		r.apiKey = other
		w := b.do(r)
		require.Equal(t, http.StatusNotFound, w.Code, "%s %s: %s", r.method, r.path, w.Body.String())
	}
	w = b.do(req{method: http.MethodGet, path: "/v1/ops/slow/keys/job-1", apiKey: owner})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var rec keyRecord
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &rec))
	require.Equal(t, "started", rec.Status)
	require.False(t, rec.CancelRequested, "another user cancelled the owner's job")
}

// Isolation per scope: tenant shares one key space among a tenant's users;
// principal gives each API key its own too; a JWT without a subject cannot
// have keys of its own.
func TestScopeIsolation(t *testing.T) {
	t.Parallel()
	rsaKey := authtest.RSA(t, "rsa-1")
	b := jwtSetup(t, rsaKey)
	b.opts.ScopeAuth = map[string][]auth.Method{"echo": {auth.MethodAPIKey, auth.MethodJWT}, "created": {auth.MethodJWT}}
	for i := range b.opts.Scopes {
		switch b.opts.Scopes[i].Name {
		case "echo":
			b.opts.Scopes[i].Isolation = IsolationTenant
		case "flaky":
			b.opts.Scopes[i].Isolation = IsolationPrincipal
		}
	}
	var err error
	b.handler, err = New(b.opts)
	require.NoError(t, err)
	as := func(sub string) string {
		return rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { c["sub"] = sub })
	}

	require.Equal(t, http.StatusOK, b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: `{"n":1}`, apiKey: as("alice")}).Code)
	w := b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: `{"n":1}`, apiKey: as("bob")})
	require.Equal(t, "true", w.Header().Get("Idempotent-Replayed"), "a tenant-wide scope shares its keys")

	// flaky fails its first call: with per-key isolation, the second API key
	// is a fresh key (and succeeds), not a retry of the first key's.
	require.Equal(t, http.StatusBadGateway, b.do(req{method: http.MethodPost, path: "/v1/ops/flaky", body: `{}`, apiKey: acmeKey1}).Code)
	w = b.do(req{method: http.MethodPost, path: "/v1/ops/flaky", body: `{}`, apiKey: acmeKey2})
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	require.Equal(t, http.StatusOK, b.do(req{method: http.MethodPost, path: "/v1/ops/flaky", body: `{}`, apiKey: acmeKey1,
		headers: []string{"Idempotency-Key", "mine"}}).Code)
	require.Equal(t, http.StatusNotFound, b.do(req{method: http.MethodGet, path: "/v1/ops/flaky/keys/mine", apiKey: acmeKey2}).Code)
	require.Equal(t, http.StatusOK, b.do(req{method: http.MethodGet, path: "/v1/ops/flaky/keys/mine", apiKey: acmeKey1}).Code)

	noSub := rsaKey.Sign(t, "acme", func(c jwt.MapClaims) { delete(c, "sub") })
	w = b.do(req{method: http.MethodPost, path: "/v1/ops/created", body: `{}`, apiKey: noSub})
	require.Equal(t, http.StatusUnauthorized, w.Code, w.Body.String())
	require.Contains(t, w.Header().Get("WWW-Authenticate"), "lacks a required claim")
	require.Zero(t, b.calls["created"].Load())

	b.opts.Scopes[0].Isolation = "users"
	_, err = New(b.opts)
	require.ErrorContains(t, err, `"users" is not an isolation`)
}
