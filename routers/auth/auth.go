package auth

// API-key authentication.
//
// Tenants authenticate with `Authorization: Bearer <api key>`. The service
// never holds the keys themselves: configuration lists, per tenant, the hex
// SHA-256 digests of its keys (several per tenant, so a key can be rotated
// without downtime). A presented key is hashed and its digest compared with
// every configured digest in constant time.
//
// This file depends on net/http only, not on gin, so a net/http service can
// use it as it is; routers adapts [Authenticator.Middleware] to gin.

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/tenancy"
)

// The two classes of authentication errors. The errors returned are
// [*Error] values, which carry the [Reason] and match one of these with
// errors.Is.
var (
	// ErrNoCredentials: the request carries no Authorization header, or one
	// whose scheme is not Bearer.
	ErrNoCredentials = errors.New("auth: no bearer credentials")
	// ErrInvalidCredentials: the bearer token is malformed or matches no
	// configured key; also more than one Authorization header.
	ErrInvalidCredentials = errors.New("auth: invalid bearer credentials")
)

// Realm is the realm named in the WWW-Authenticate challenge.
const Realm = "idemguard"

// digestLen is the length of a hex SHA-256 digest.
const digestLen = 2 * sha256.Size

// Authenticator maps API keys to tenants. It is immutable once built and safe
// for concurrent use.
type Authenticator struct {
	entries []authEntry
}

type authEntry struct {
	digest [sha256.Size]byte
	tenant tenancy.ID
	name   string
	// scopes, when not nil, are the only scopes the key is good for
	// ([Authenticator.WithScopedKey]).
	scopes []string
}

// MaxKeyNameLen is the longest API key name.
const MaxKeyNameLen = 64

// ParseKeyEntry splits one configured API key, "<hex digest>" or
// "<name>=<hex digest>", into its name and digest. The name is what the
// audit trail shows as the caller ("key:<name>"): 1 to MaxKeyNameLen
// characters of [A-Za-z0-9._-]. Without one the key is named by the first
// 12 hex digits of its digest, which the configuration already holds and
// which say nothing about the key itself. The digest is returned as given
// (NewAuthenticator validates it).
func ParseKeyEntry(entry string) (name, digest string, err error) {
	name, digest, named := strings.Cut(strings.TrimSpace(entry), "=")
	if !named {
		digest = name
		return strings.ToLower(digest[:min(12, len(digest))]), digest, nil
	}
	name, digest = strings.TrimSpace(name), strings.TrimSpace(digest)
	if err := validKeyName(name); err != nil {
		return "", "", err
	}
	return name, digest, nil
}

func validKeyName(name string) error {
	if name == "" || len(name) > MaxKeyNameLen {
		return fmt.Errorf("a key name (before =) is 1 to %d characters, got %d", MaxKeyNameLen, len(name))
	}
	for _, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("a key name (before =) holds only [A-Za-z0-9._-]")
		}
	}
	return nil
}

// NewAuthenticator takes, per tenant, the hex SHA-256 digests of its API keys
// (see [HashAPIKey]); a tenant may have several (key rotation). A digest may
// be preceded by the key's name and "=" ([ParseKeyEntry]). It validates
// every tenant ID ([tenancy.ParseID]) and every digest (64 hex characters, either
// case). It rejects a tenant without keys and a digest configured for two
// tenants (a key must name exactly one tenant); a digest listed twice for
// one tenant counts once. Errors name the tenant and the position of the bad
// digest, never the digest itself.
//
// An empty map gives an Authenticator that rejects every request; requiring
// at least one key is the configuration's job.
func NewAuthenticator(keys map[tenancy.ID][]string) (*Authenticator, error) {
	tenants := make([]tenancy.ID, 0, len(keys))
	for id := range keys {
		tenants = append(tenants, id)
	}
	// Sorted, so the same configuration always reports the same first error.
	sort.Slice(tenants, func(i, j int) bool { return tenants[i] < tenants[j] })

	a := &Authenticator{}
	owner := make(map[[sha256.Size]byte]tenancy.ID)
	for _, id := range tenants {
		if _, err := tenancy.ParseID(string(id)); err != nil {
			return nil, fmt.Errorf("auth: API keys: tenant %q: %w", id, err)
		}
		digests := keys[id]
		if len(digests) == 0 {
			return nil, fmt.Errorf("auth: API keys: tenant %q has no key digests; list at least one hex SHA-256 digest or remove the tenant", id)
		}
		for i, entry := range digests {
			name, d, err := ParseKeyEntry(entry)
			if err != nil {
				return nil, fmt.Errorf("auth: API keys: tenant %q, digest #%d: %w", id, i+1, err)
			}
			var sum [sha256.Size]byte
			if len(d) != digestLen {
				return nil, fmt.Errorf("auth: API keys: tenant %q, digest #%d: %d characters, want the %d hex characters of a SHA-256 digest (see HashAPIKey), not the key itself", id, i+1, len(d), digestLen)
			}
			if _, err := hex.Decode(sum[:], []byte(d)); err != nil {
				return nil, fmt.Errorf("auth: API keys: tenant %q, digest #%d: not hexadecimal; want the hex SHA-256 digest of the key", id, i+1)
			}
			if prev, dup := owner[sum]; dup {
				if prev == id {
					continue // listed twice for one tenant (e.g. upper and lower case): harmless
				}
				return nil, fmt.Errorf("auth: API keys: tenant %q, digest #%d: the same key is also configured for tenant %q; a key must name exactly one tenant", id, i+1, prev)
			}
			owner[sum] = id
			a.entries = append(a.entries, authEntry{digest: sum, tenant: id, name: name})
		}
	}
	return a, nil
}

// WithScopedKey returns a copy of a that also accepts the key whose hex
// SHA-256 digest is digest, for tenant and only on the named scopes (e.g.
// development mode's public demo key on the demo scopes). Such a key is
// recognised only by [Credentials.AuthenticateScope] on one of scopes (or
// on a route of no scope, which shows the tenant its own figures);
// everywhere else — another scope, [Authenticator.Identify],
// [Authenticator.Middleware] — it is answered like an unknown key, so a
// caller learns nothing about where it would work. It refuses a tenant that
// already has keys (a scoped key is never added to a configured tenant), a
// digest configured already, and an empty scopes.
func (a *Authenticator) WithScopedKey(tenant tenancy.ID, name, digest string, scopes []string) (*Authenticator, error) {
	if _, err := tenancy.ParseID(string(tenant)); err != nil {
		return nil, fmt.Errorf("auth: scoped key: tenant %q: %w", tenant, err)
	}
	if err := validKeyName(name); err != nil {
		return nil, fmt.Errorf("auth: scoped key: %w", err)
	}
	if len(scopes) == 0 {
		return nil, errors.New("auth: scoped key: list at least one scope")
	}
	var sum [sha256.Size]byte
	if len(digest) != digestLen {
		return nil, fmt.Errorf("auth: scoped key: want the %d hex characters of a SHA-256 digest", digestLen)
	}
	if _, err := hex.Decode(sum[:], []byte(digest)); err != nil {
		return nil, errors.New("auth: scoped key: not hexadecimal; want the hex SHA-256 digest of the key")
	}
	out := &Authenticator{}
	if a != nil {
		out.entries = slices.Clone(a.entries)
	}
	for _, e := range out.entries {
		if e.tenant == tenant {
			return nil, fmt.Errorf("auth: scoped key: tenant %q has configured keys; a scoped key is never added to a configured tenant", tenant)
		}
		if e.digest == sum {
			return nil, fmt.Errorf("auth: scoped key: the same key is configured for tenant %q", e.tenant)
		}
	}
	out.entries = append(out.entries, authEntry{digest: sum, tenant: tenant, name: name, scopes: slices.Clone(scopes)})
	return out, nil
}

// HashAPIKey returns the hex SHA-256 digest of key: the form in which API
// keys are configured.
func HashAPIKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Authenticate returns the tenant whose API key is token. It hashes token
// with SHA-256 and compares the digest with every configured digest using
// crypto/subtle, without an early exit, so the time it takes does not depend
// on which key (if any) matched. An empty token never matches.
func (a *Authenticator) Authenticate(token string) (tenancy.ID, bool) {
	id, _, ok := a.Identify(token)
	return id, ok
}

// Identify is Authenticate that also returns the matched key's name
// ([ParseKeyEntry]): never the key, nor its digest beyond what names it.
// A key restricted to scopes ([Authenticator.WithScopedKey]) matches
// nothing here.
func (a *Authenticator) Identify(token string) (tenant tenancy.ID, name string, ok bool) {
	e, ok := a.lookup(token)
	if !ok || e.scopes != nil {
		return "", "", false
	}
	return e.tenant, e.name, true
}

// identifyScope is Identify for a request to scope ("" for a route of no
// scope): a scoped key matches only on one of its scopes or on such a route.
func (a *Authenticator) identifyScope(token, scope string) (tenant tenancy.ID, name string, ok bool) {
	e, ok := a.lookup(token)
	if !ok || (e.scopes != nil && scope != "" && !slices.Contains(e.scopes, scope)) {
		return "", "", false
	}
	return e.tenant, e.name, true
}

func (a *Authenticator) lookup(token string) (authEntry, bool) {
	if a == nil || token == "" {
		return authEntry{}, false
	}
	sum := sha256.Sum256([]byte(token))
	match := -1
	for i := range a.entries {
		eq := subtle.ConstantTimeCompare(sum[:], a.entries[i].digest[:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		return authEntry{}, false
	}
	return a.entries[match], true
}

// KeyActor is the audit trail's actor of an API key named name:
// "key:<name>".
func KeyActor(name string) string { return "key:" + name }

// AuthenticateRequest authenticates r by its `Authorization: Bearer <key>`
// header. The scheme is matched case-insensitively (RFC 9110 §11.1). It
// returns an [*Error]: [ReasonMissing] when there is no bearer Authorization
// header, [ReasonMalformed] when there are several or the token is empty or
// holds white space, [ReasonUnknownAPIKey] when it matches no key. Errors
// never contain the token.
func (a *Authenticator) AuthenticateRequest(r *http.Request) (tenancy.ID, error) {
	id, _, err := a.identifyRequest(r)
	return id, err
}

func (a *Authenticator) identifyRequest(r *http.Request) (tenancy.ID, string, error) {
	token, err := BearerToken(r)
	if err != nil {
		return "", "", err
	}
	id, name, ok := a.Identify(token)
	if !ok {
		return "", "", newError(ReasonUnknownAPIKey, nil)
	}
	return id, name, nil
}

// BearerToken returns the token of r's `Authorization: Bearer <token>`
// header, the scheme matched case-insensitively (RFC 9110 §11.1). It
// returns an [*Error]: [ReasonMissing] when there is no bearer Authorization
// header, [ReasonMalformed] when there are several or the token is empty or
// holds white space. Errors never contain the token.
func BearerToken(r *http.Request) (string, error) {
	values := r.Header["Authorization"] // the name is canonical: no Values
	switch {
	case len(values) == 0:
		return "", newError(ReasonMissing, nil)
	case len(values) > 1:
		return "", newError(ReasonMalformed, errors.New("more than one Authorization header"))
	}
	scheme, token, _ := strings.Cut(strings.TrimSpace(values[0]), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", newError(ReasonMissing, errors.New("the Authorization scheme is not Bearer"))
	}
	token = strings.TrimLeft(token, " ")
	// ContainsAny(token, " \t"), without building its byte set and
	// testing the token byte by byte on every request.
	if token == "" || strings.IndexByte(token, ' ') >= 0 || strings.IndexByte(token, '\t') >= 0 {
		return "", newError(ReasonMalformed, errors.New("empty, or white space in the token"))
	}
	return token, nil
}

// Middleware returns net/http middleware that authenticates each request with
// [Authenticator.AuthenticateRequest]. On success the tenant is put into the
// request's context ([WithTenant]; read it with [FromContext]), and the
// key's actor ([KeyActor]) with idemguard.WithActor, and next runs.
// On failure next does not run: the WWW-Authenticate header is set
// ([Challenge]) and onFail writes the response; a nil onFail writes a 401
// application/problem+json (RFC 9457) with ok:false, stopReason unknown and
// the reason's detail ([Error.Detail]). The error passed to onFail is an
// [*Error] (wrapping [ErrNoCredentials] or [ErrInvalidCredentials]) and
// never contains the token.
//
// routers adapts this middleware to gin (the tenant is then also in the gin
// context); this package deliberately does not depend on gin.
func (a *Authenticator) Middleware(onFail func(w http.ResponseWriter, r *http.Request, err error)) func(http.Handler) http.Handler {
	if onFail == nil {
		onFail = writeUnauthorized
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, name, err := a.identifyRequest(r)
			if err != nil {
				w.Header().Set("WWW-Authenticate", Challenge(err))
				onFail(w, r, err)
				return
			}
			ctx := idemguard.WithActor(tenancy.WithTenant(r.Context(), id), KeyActor(name))
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// writeUnauthorized is the default 401 answer of Middleware.
func writeUnauthorized(w http.ResponseWriter, _ *http.Request, err error) {
	detail := reasonTexts[ReasonRejected].detail
	var e *Error
	if errors.As(err, &e) {
		detail = e.Detail()
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(struct {
		Type       string `json:"type"`
		Title      string `json:"title"`
		Status     int    `json:"status"`
		Detail     string `json:"detail"`
		OK         bool   `json:"ok"`
		StopReason string `json:"stopReason"`
	}{"about:blank", "Unauthorized", http.StatusUnauthorized, detail, false, "unknown"})
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}
