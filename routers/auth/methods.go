package auth

// Choosing between API keys and JWTs, per scope.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/idemguard/idemguard/tenancy"
)

// Method is a kind of bearer credential a scope accepts.
type Method string

// The credential methods.
const (
	// MethodAPIKey: a service's API key (see [Authenticator]).
	MethodAPIKey Method = "api_key"
	// MethodJWT: a browser's JWT from the product's identity provider (see
	// [JWTVerifier]).
	MethodJWT Method = "jwt"
)

// DefaultMethods is what a scope accepts when its configuration names
// nothing: API keys only.
var DefaultMethods = []Method{MethodAPIKey}

// ParseMethod accepts "api_key" or "jwt".
func ParseMethod(s string) (Method, error) {
	switch m := Method(s); m {
	case MethodAPIKey, MethodJWT:
		return m, nil
	}
	return "", fmt.Errorf("%q is not a credential method; use %s or %s", s, MethodAPIKey, MethodJWT)
}

// Credentials authenticate a request by API key, JWT or either, as the scope
// allows. A nil field means that method is not configured: a scope that
// accepts only it rejects every request. Safe for concurrent use.
type Credentials struct {
	APIKeys *Authenticator
	JWT     *JWTVerifier
}

// Principal is who a request authenticated as.
type Principal struct {
	Tenant tenancy.ID
	Method Method
	// KeyName is, for MethodAPIKey, the matched key's name (ParseKeyEntry).
	KeyName string
	// Subject is, for MethodJWT, the token's sub claim: it may name a
	// person, so it is never logged; hash it before storing it.
	Subject string
}

// AuthenticateRequest authenticates r's bearer token by the methods in
// accept (nil: [DefaultMethods]). When API keys are accepted the token is
// first compared with the API keys; when JWTs are accepted and the token has
// the form of a JWT (three dot-separated parts), it is verified as one. The
// tenant comes only from the matched key or the verified claim. Errors are
// [*Error] values (wrapping [ErrNoCredentials] or [ErrInvalidCredentials])
// whose reason says which check failed; they never contain the token.
func (c *Credentials) AuthenticateRequest(ctx context.Context, r *http.Request, accept []Method) (tenancy.ID, Method, error) {
	p, err := c.Authenticate(ctx, r, accept)
	return p.Tenant, p.Method, err
}

// Authenticate is AuthenticateRequest that returns the whole Principal:
// also the API key's name or the JWT's subject.
// A key restricted to scopes ([Authenticator.WithScopedKey]) is not
// recognised: use AuthenticateScope.
func (c *Credentials) Authenticate(ctx context.Context, r *http.Request, accept []Method) (Principal, error) {
	return c.authenticate(ctx, r, accept, func(token string) (tenancy.ID, string, bool) { return c.APIKeys.Identify(token) })
}

// AuthenticateScope is Authenticate for a request to scope, or to a route of
// no scope when scope is "" (e.g. the tenant's own figures): it also
// recognises the keys restricted to scopes ([Authenticator.WithScopedKey]),
// on their scopes and on such routes only. Elsewhere such a key fails like
// an unknown key ([ReasonUnknownAPIKey]).
func (c *Credentials) AuthenticateScope(ctx context.Context, r *http.Request, scope string, accept []Method) (Principal, error) {
	return c.authenticate(ctx, r, accept, func(token string) (tenancy.ID, string, bool) {
		return c.APIKeys.identifyScope(token, scope)
	})
}

func (c *Credentials) authenticate(ctx context.Context, r *http.Request, accept []Method,
	identify func(token string) (tenancy.ID, string, bool)) (Principal, error) {
	if accept == nil {
		accept = DefaultMethods
	}
	token, err := BearerToken(r)
	if err != nil {
		return Principal{}, err
	}
	apiKey, jwtOK := slices.Contains(accept, MethodAPIKey), slices.Contains(accept, MethodJWT)
	if apiKey {
		if id, name, ok := identify(token); ok {
			return Principal{Tenant: id, Method: MethodAPIKey, KeyName: name}, nil
		}
	}
	if jwtOK && (strings.Count(token, ".") == 2 || !apiKey) {
		if c.JWT == nil {
			return Principal{}, newError(ReasonRejected, errors.New("jwt: no JWKS is configured"))
		}
		id, sub, err := c.JWT.VerifySubject(ctx, token)
		if err != nil {
			return Principal{}, err
		}
		return Principal{Tenant: id, Method: MethodJWT, Subject: sub}, nil
	}
	return Principal{}, newError(ReasonUnknownAPIKey, nil)
}
