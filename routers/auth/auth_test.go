package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/tenancy"
	"github.com/stretchr/testify/require"
)

func TestHashAPIKey(t *testing.T) {
	t.Parallel()
	// echo -n 'abc' | sha256sum
	require.Equal(t, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", HashAPIKey("abc"))
	sum := sha256.Sum256([]byte("key-1"))
	require.Equal(t, hex.EncodeToString(sum[:]), HashAPIKey("key-1"))
	require.Len(t, HashAPIKey(""), 64)
}

func TestNewAuthenticatorValidation(t *testing.T) {
	t.Parallel()
	good := HashAPIKey("k1")
	for name, tc := range map[string]struct {
		keys map[tenancy.ID][]string
		want []string // substrings of the error
	}{
		"bad tenant":    {map[tenancy.ID][]string{"bad tenant": {good}}, []string{`tenant "bad tenant"`, "invalid tenant id"}},
		"empty tenant":  {map[tenancy.ID][]string{"": {good}}, []string{`tenant ""`, "empty"}},
		"no digests":    {map[tenancy.ID][]string{"acme": nil}, []string{`tenant "acme"`, "no key digests"}},
		"short digest":  {map[tenancy.ID][]string{"acme": {good, "abc"}}, []string{`tenant "acme"`, "digest #2", "3 characters", "64 hex"}},
		"raw key":       {map[tenancy.ID][]string{"acme": {"sk-live-" + strings.Repeat("x", 20)}}, []string{`tenant "acme"`, "digest #1", "not the key itself"}},
		"not hex":       {map[tenancy.ID][]string{"acme": {strings.Repeat("g", 64)}}, []string{`tenant "acme"`, "digest #1", "not hexadecimal"}},
		"shared by two": {map[tenancy.ID][]string{"acme": {good}, "beta": {good}}, []string{`tenant "beta"`, `also configured for tenant "acme"`}},
		"shared, case":  {map[tenancy.ID][]string{"acme": {good}, "beta": {strings.ToUpper(good)}}, []string{`tenant "beta"`, `also configured for tenant "acme"`}},
	} {
		a, err := NewAuthenticator(tc.keys)
		require.Error(t, err, name)
		require.Nil(t, a, name)
		for _, w := range tc.want {
			require.ErrorContains(t, err, w, name)
		}
		if name == "not hex" || name == "raw key" {
			require.NotContains(t, err.Error(), tc.keys["acme"][0], "%s: the error echoes the value", name)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	a, err := NewAuthenticator(map[tenancy.ID][]string{
		// acme's new key is listed twice (once upper-case): it counts once.
		"acme": {HashAPIKey("acme-old-key"), strings.ToUpper(HashAPIKey("acme-new-key")), HashAPIKey("acme-new-key")},
		"beta": {HashAPIKey("beta-key")},
	})
	require.NoError(t, err)

	for key, want := range map[string]tenancy.ID{"acme-old-key": "acme", "acme-new-key": "acme", "beta-key": "beta"} {
		id, ok := a.Authenticate(key)
		require.True(t, ok, key)
		require.Equal(t, want, id, key)
	}
	// Wrong keys of the same length as real ones, a prefix, a suffix, the
	// digest itself, and the empty token all fail.
	for _, bad := range []string{"acme-old-kez", "beta-kex", "Beta-key", "acme-old-ke", "acme-old-key ", HashAPIKey("beta-key"), ""} {
		id, ok := a.Authenticate(bad)
		require.False(t, ok, "%q", bad)
		require.Empty(t, id)
	}

	require.Len(t, a.entries, 3, "a digest listed twice for one tenant counts once")

	empty, err := NewAuthenticator(nil)
	require.NoError(t, err)
	_, ok := empty.Authenticate("anything")
	require.False(t, ok)
	var nilAuth *Authenticator
	_, ok = nilAuth.Authenticate("anything")
	require.False(t, ok)
}

func TestAuthenticateRequest(t *testing.T) {
	t.Parallel()
	a, err := NewAuthenticator(map[tenancy.ID][]string{"acme": {HashAPIKey("secret-key")}})
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		headers []string
		tenant  tenancy.ID
		reason  Reason
	}{
		"bearer":         {[]string{"Bearer secret-key"}, "acme", ""},
		"lower scheme":   {[]string{"bearer secret-key"}, "acme", ""},
		"extra spaces":   {[]string{"Bearer   secret-key "}, "acme", ""},
		"none":           {nil, "", ReasonMissing},
		"basic":          {[]string{"Basic c2VjcmV0LWtleQ=="}, "", ReasonMissing},
		"bare key":       {[]string{"secret-key"}, "", ReasonMissing},
		"no token":       {[]string{"Bearer"}, "", ReasonMalformed},
		"blank token":    {[]string{"Bearer    "}, "", ReasonMalformed},
		"two tokens":     {[]string{"Bearer secret-key other"}, "", ReasonMalformed},
		"wrong key":      {[]string{"Bearer secret-kez"}, "", ReasonUnknownAPIKey},
		"two headers":    {[]string{"Bearer secret-key", "Bearer secret-key"}, "", ReasonMalformed},
		"digest as key":  {[]string{"Bearer " + HashAPIKey("secret-key")}, "", ReasonUnknownAPIKey},
		"tab separator":  {[]string{"Bearer\tsecret-key"}, "", ReasonMissing},
		"token with tab": {[]string{"Bearer secret\tkey"}, "", ReasonMalformed},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for _, h := range tc.headers {
			r.Header.Add("Authorization", h)
		}
		id, err := a.AuthenticateRequest(r)
		if tc.reason == "" {
			require.NoError(t, err, name)
			require.Equal(t, tc.tenant, id, name)
			continue
		}
		require.Equal(t, tc.reason, ReasonOf(err), name)
		if tc.reason == ReasonMissing {
			require.ErrorIs(t, err, ErrNoCredentials, name)
		} else {
			require.ErrorIs(t, err, ErrInvalidCredentials, name)
		}
		require.Empty(t, id, name)
		require.NotContains(t, err.Error(), "secret", "%s: error echoes the token", name)
	}
}

func TestChallenge(t *testing.T) {
	t.Parallel()
	require.Equal(t, `Bearer realm="idemguard"`, Challenge(ErrNoCredentials))
	require.Equal(t, `Bearer realm="idemguard"`, Challenge(newError(ReasonMissing, nil)))
	require.Equal(t, `Bearer realm="idemguard", error="invalid_token", error_description="the credential was not accepted"`,
		Challenge(ErrInvalidCredentials))
	require.Equal(t, `Bearer realm="idemguard", error="invalid_token", error_description="the token has expired"`,
		Challenge(fmt.Errorf("wrapped: %w", newError(ReasonExpired, errors.New("jwt: expired")))))

	// Every reason has its own detail and description, and each description
	// is a valid RFC 6750 quoted value (printable ASCII, no " or \).
	details, descriptions := map[string]Reason{}, map[string]Reason{}
	for r, texts := range reasonTexts {
		require.NotContains(t, details, texts.detail, "%s and %s share a detail", r, details[texts.detail])
		require.NotContains(t, descriptions, texts.description, "%s and %s share a description", r, descriptions[texts.description])
		details[texts.detail], descriptions[texts.description] = r, r
		for _, c := range texts.description {
			require.True(t, c >= 0x20 && c <= 0x7e && c != '"' && c != '\\', "%s: %q in error_description", r, c)
		}
		e := newError(r, nil)
		require.Equal(t, texts.detail, e.Detail())
		require.Equal(t, r, ReasonOf(e))
		if r == ReasonMissing {
			require.ErrorIs(t, e, ErrNoCredentials)
			require.NotErrorIs(t, e, ErrInvalidCredentials)
		} else {
			require.ErrorIs(t, e, ErrInvalidCredentials)
			require.NotErrorIs(t, e, ErrNoCredentials)
		}
	}
}

// middlewareRejections are requests the default failure answers with 401:
// the Authorization header sent, and the challenge and detail answered.
var middlewareRejections = []struct{ auth, challenge, detail string }{
	{"", `Bearer realm="idemguard"`,
		"the request carries no credentials; send them as Authorization: Bearer <credential>"},
	{"Basic x", `Bearer realm="idemguard"`,
		"the request carries no credentials; send them as Authorization: Bearer <credential>"},
	{"Bearer wrong", `Bearer realm="idemguard", error="invalid_token", error_description="unknown API key"`,
		"the API key is not recognised; check that it is a current key of your tenant"},
	{"Bearer wrong key", `Bearer realm="idemguard", error="invalid_token", error_description="the token is malformed"`,
		"the bearer credential is malformed (send exactly one Authorization: Bearer header with one token)"},
}

// serveWith serves a request carrying the Authorization header authorization
// (none when empty) with h.
func serveWith(h http.Handler, method, target, authorization string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	a, err := NewAuthenticator(map[tenancy.ID][]string{"acme": {HashAPIKey("k-acme")}, "beta": {HashAPIKey("k-beta")}})
	require.NoError(t, err)

	var seen []tenancy.ID
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := tenancy.FromContext(r.Context())
		require.True(t, ok)
		seen = append(seen, id)
		w.WriteHeader(http.StatusNoContent)
	})

	t.Run("default failure", func(t *testing.T) {
		h := a.Middleware(nil)(next)
		for _, tc := range middlewareRejections {
			w := serveWith(h, http.MethodPost, "/v1/ops/x", tc.auth)
			require.Equal(t, http.StatusUnauthorized, w.Code, tc.auth)
			require.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
			require.Equal(t, tc.challenge, w.Header().Get("WWW-Authenticate"), tc.auth)
			var p map[string]any
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p))
			require.Equal(t, false, p["ok"])
			require.Equal(t, "unknown", p["stopReason"])
			require.EqualValues(t, 401, p["status"])
			require.Equal(t, tc.detail, p["detail"], tc.auth)
			require.NotContains(t, w.Body.String(), "wrong")
		}
		require.Empty(t, seen, "next ran for a rejected request")
	})

	t.Run("custom failure and success", func(t *testing.T) {
		var failures []error
		h := a.Middleware(func(w http.ResponseWriter, r *http.Request, err error) {
			failures = append(failures, err)
			require.Equal(t, `Bearer realm="idemguard", error="invalid_token", error_description="unknown API key"`, w.Header().Get("WWW-Authenticate"))
			w.WriteHeader(http.StatusTeapot)
		})(next)

		w := serveWith(h, http.MethodGet, "/", "Bearer nope")
		require.Equal(t, http.StatusTeapot, w.Code)
		require.Len(t, failures, 1)
		require.ErrorIs(t, failures[0], ErrInvalidCredentials)

		for _, key := range []string{"k-beta", "k-acme"} {
			w = serveWith(h, http.MethodGet, "/", "Bearer "+key)
			require.Equal(t, http.StatusNoContent, w.Code)
			require.Empty(t, w.Header().Get("WWW-Authenticate"))
		}
		require.Equal(t, []tenancy.ID{"beta", "acme"}, seen)
	})
}

func BenchmarkAuthenticate(b *testing.B) {
	keys := map[tenancy.ID][]string{}
	for i := range 50 {
		id := tenancy.ID("tenant-" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		keys[id] = []string{HashAPIKey(string(id) + "-key")}
	}
	a, err := NewAuthenticator(keys)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		a.Authenticate("no-such-key-of-some-length")
	}
}

// TestKeyNames: a key is named by its entry's "<name>=" (what the audit
// trail shows), or by its digest's first 12 hex digits; never by the key.
func TestKeyNames(t *testing.T) {
	t.Parallel()
	for entry, want := range map[string][2]string{
		HashAPIKey("k1"):                     {HashAPIKey("k1")[:12], HashAPIKey("k1")},
		" billing=" + HashAPIKey("k2") + " ": {"billing", HashAPIKey("k2")},
		"a.b_c-D=" + HashAPIKey("k3"):        {"a.b_c-D", HashAPIKey("k3")},
	} {
		name, digest, err := ParseKeyEntry(entry)
		require.NoError(t, err, entry)
		require.Equal(t, want, [2]string{name, digest}, entry)
	}
	for _, bad := range []string{"=" + HashAPIKey("k"), "a b=" + HashAPIKey("k"), "x:y=" + HashAPIKey("k"), strings.Repeat("n", MaxKeyNameLen+1) + "=" + HashAPIKey("k")} {
		_, _, err := ParseKeyEntry(bad)
		require.Error(t, err, bad)
		_, err = NewAuthenticator(map[tenancy.ID][]string{"acme": {bad}})
		require.Error(t, err, bad)
	}

	a, err := NewAuthenticator(map[tenancy.ID][]string{"acme": {"billing=" + HashAPIKey("k-named"), HashAPIKey("k-plain")}})
	require.NoError(t, err)
	id, name, ok := a.Identify("k-named")
	require.True(t, ok)
	require.Equal(t, [2]string{"acme", "billing"}, [2]string{string(id), name})
	_, name, ok = a.Identify("k-plain")
	require.True(t, ok)
	require.Equal(t, HashAPIKey("k-plain")[:12], name)
	_, _, ok = a.Identify("k-other")
	require.False(t, ok)

	// The net/http middleware puts the key's actor into the context.
	var actor string
	h := a.Middleware(nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		actor = idemguard.ActorFrom(r.Context())
	}))
	r := httptest.NewRequest(http.MethodPost, "/x", nil)
	r.Header.Set("Authorization", "Bearer k-named")
	h.ServeHTTP(httptest.NewRecorder(), r)
	require.Equal(t, "key:billing", actor)
}
