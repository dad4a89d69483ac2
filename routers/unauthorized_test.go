package routers

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/routers/auth/authtest"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/routers/middleware"
	"github.com/idemguard/idemguard/store/memstore"
	"github.com/idemguard/idemguard/tenancy"
)

// The 401 answers of the API, one per failed check: each with its own
// detail and WWW-Authenticate, asserted exactly.
const (
	challengeMissing = `Bearer realm="idemguard"`
	detailMissing    = "the request carries no credentials; send them as Authorization: Bearer <credential>"
	detailMalformed  = "the bearer credential is malformed (send exactly one Authorization: Bearer header with one token)"
)

func invalidToken(description string) string {
	return `Bearer realm="idemguard", error="invalid_token", error_description="` + description + `"`
}

func TestUnauthorizedSaysWhy(t *testing.T) {
	t.Parallel()
	rsaKey := authtest.RSA(t, "rsa-1")
	b := jwtSetup(t, rsaKey)

	for name, tc := range unauthorizedCases(t, rsaKey) {
		for _, r := range []req{
			{method: http.MethodPost, path: "/v1/ops/echo", body: `{"n":1}`},
			{method: http.MethodGet, path: "/v1/ops/echo/keys/k-1"},
		} {
			for _, a := range tc.authorization {
				r.headers = append(r.headers, "Authorization", a)
			}
			w := b.do(r)
			require.Equal(t, http.StatusUnauthorized, w.Code, "%s %s", name, r.method)
			p := problemOf(t, w)
			require.Equal(t, tc.detail, p["detail"], "%s %s", name, r.method)
			require.Equal(t, tc.challenge, w.Header().Get("WWW-Authenticate"), "%s %s", name, r.method)
			for _, leak := range []string{authtest.Issuer, authtest.Audience, "rsa-1", "acme", "tenant_id"} {
				require.NotContains(t, w.Body.String()+w.Header().Get("WWW-Authenticate"), leak, "%s: the answer names what the service expects", name)
			}
		}
	}
	require.Zero(t, b.totalCalls())
	require.Empty(t, b.store.Rows())
}

// unauthorizedCase is a credential the API refuses (its Authorization
// headers) with the challenge and detail of its 401.
type unauthorizedCase struct {
	authorization []string
	challenge     string
	detail        string
}

// unauthorizedCases are the credentials TestUnauthorizedSaysWhy sends, one
// for each failed check; the tokens are rsaKey's, of tenant acme.
func unauthorizedCases(t *testing.T, rsaKey authtest.Key) map[string]unauthorizedCase {
	now := time.Now()
	sign := func(mutate func(jwt.MapClaims)) string { return rsaKey.Sign(t, "acme", mutate) }
	return map[string]unauthorizedCase{
		"missing":              {nil, challengeMissing, detailMissing},
		"other scheme":         {[]string{"Basic YWNtZTprZXk="}, challengeMissing, detailMissing},
		"two headers":          {[]string{"Bearer " + acmeKey1, "Bearer " + acmeKey1}, invalidToken("the token is malformed"), detailMalformed},
		"white space in token": {[]string{"Bearer " + acmeKey1 + " x"}, invalidToken("the token is malformed"), detailMalformed},
		"malformed jwt":        {[]string{"Bearer a.b.c"}, invalidToken("the token is malformed"), detailMalformed},
		"unknown api key": {[]string{"Bearer acme-key-one-0009"}, invalidToken("unknown API key"),
			"the API key is not recognised; check that it is a current key of your tenant"},
		"expired": {[]string{"Bearer " + sign(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() })},
			invalidToken("the token has expired"),
			"the token has expired; get a new one from your identity provider and retry"},
		"not yet valid": {[]string{"Bearer " + sign(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() })},
			invalidToken("the token is not valid yet"),
			"the token is not valid yet (nbf or iat in the future); check the clocks of your identity provider and this client"},
		"wrong issuer": {[]string{"Bearer " + sign(func(c jwt.MapClaims) { c["iss"] = "https://evil.test/" })},
			invalidToken("the token issuer is not trusted"),
			"the token was issued by an issuer this service does not trust"},
		"wrong audience": {[]string{"Bearer " + sign(func(c jwt.MapClaims) { c["aud"] = "another-api" })},
			invalidToken("the token audience is not this service"),
			"the token was not issued for this service (its audience does not include it)"},
		"unknown key id": {[]string{"Bearer " + authtest.RSA(t, "rsa-2").Sign(t, "acme", nil)},
			invalidToken("unknown signing key id"),
			"the token is signed with a key id the identity provider's key set does not hold; if its keys were just rotated, retry in a minute"},
		"bad signature": {[]string{"Bearer " + authtest.RSA(t, "rsa-1").Sign(t, "acme", nil)},
			invalidToken("the token signature is invalid"),
			"the token's signature does not verify, or its algorithm is not allowed"},
		"missing claim": {[]string{"Bearer " + sign(func(c jwt.MapClaims) { delete(c, "aud") })},
			invalidToken("the token lacks a required claim"),
			"the token lacks a required claim (exp, iss or aud; sub where keys are kept per user)"},
		"invalid tenant": {[]string{"Bearer " + sign(func(c jwt.MapClaims) { c["tenant_id"] = "acme/../beta" })},
			invalidToken("the token names no valid tenant"),
			"the token's tenant claim is missing or is not a valid tenant ID"},
	}
}

// On a team's own routes the authentication is the team's: a 401 of the
// middleware names no scheme unless the team's Tenant function used
// idemguard's bearer authentication, whose reason it then gives.
func TestIdempotentUnauthorizedNamesNoOtherScheme(t *testing.T) {
	t.Parallel()
	g, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: testSecret,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, g.Close(context.Background())) })
	keys, err := auth.NewAuthenticator(map[tenancy.ID][]string{"acme": {auth.HashAPIKey("team-key")}})
	require.NoError(t, err)

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	ok := func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"ok": true}) }
	// The team's tenant comes from its own session middleware (none here).
	r.POST("/context", Idempotent(middleware.Options{Guard: g}), ok)
	r.POST("/cookie", Idempotent(middleware.Options{Guard: g, Tenant: func(r *http.Request) (tenancy.ID, error) {
		c, err := r.Cookie("session")
		if err != nil {
			return "", err
		}
		return tenancy.ID(c.Value), nil
	}}), ok)
	r.POST("/bearer", Idempotent(middleware.Options{Guard: g, Tenant: keys.AuthenticateRequest}), ok)

	for name, tc := range map[string]struct {
		path, authorization string
		challenge, detail   string
	}{
		"no tenant in the context": {"/context", "", "", pipeline.DetailNoTenant},
		"team's cookie missing":    {"/cookie", "", "", pipeline.DetailRejected},
		"team's cookie, a bearer":  {"/cookie", "Bearer x", "", pipeline.DetailRejected},
		"bearer missing":           {"/bearer", "", challengeMissing, detailMissing},
		"bearer unknown key": {"/bearer", "Bearer nope", invalidToken("unknown API key"),
			"the API key is not recognised; check that it is a current key of your tenant"},
	} {
		hr := httptest.NewRequest(http.MethodPost, tc.path, strings.NewReader(`{}`))
		if tc.authorization != "" {
			hr.Header.Set("Authorization", tc.authorization)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, hr)
		require.Equal(t, http.StatusUnauthorized, w.Code, name)
		require.Equal(t, pipeline.ContentProblem, w.Header().Get("Content-Type"), name)
		var p map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p), name)
		require.Equal(t, tc.detail, p["detail"], name)
		require.Equal(t, tc.challenge, w.Header().Get("WWW-Authenticate"), name)
		if tc.path != "/bearer" {
			for _, scheme := range []string{"API key", "JWT", "token", "Bearer"} {
				require.NotContains(t, p["detail"], scheme, "%s: the detail names a scheme the team did not configure", name)
			}
		}
	}
}
