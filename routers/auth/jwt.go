package auth

// JWT bearer authentication, for browsers.
//
// A browser must never hold a tenant's API key: every user of the page could
// read it. It sends instead a JWT issued by the product's own identity
// provider. [JWTVerifier] checks it against the provider's JWKS (keys cached,
// refreshed periodically and, rate-limited, when a token names an unknown
// kid), its issuer, audience, expiry (with a small leeway) and an explicit
// algorithm allowlist, and takes the tenant from one configured claim,
// validated like every tenant ID ([tenancy.ParseID]). The JOSE work is done by
// github.com/golang-jwt/jwt/v5 and github.com/MicahParks/keyfunc/v3.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"github.com/idemguard/idemguard/tenancy"
	"golang.org/x/time/rate"
)

// Defaults and limits of [JWTConfig].
const (
	// DefaultTenantClaim is the claim that names the tenant.
	DefaultTenantClaim = "tenant_id"
	// DefaultJWTLeeway is the clock skew allowed on exp, nbf and iat.
	DefaultJWTLeeway = 30 * time.Second
	// MaxJWTLeeway is the largest leeway accepted.
	MaxJWTLeeway = 5 * time.Minute
	// DefaultJWKSRefreshInterval is how often the JWKS is fetched again.
	DefaultJWKSRefreshInterval = 15 * time.Minute
	// DefaultJWKSUnknownKIDInterval is the least time between two fetches
	// caused by tokens naming a kid the cached JWKS does not hold.
	DefaultJWKSUnknownKIDInterval = time.Minute
	// DefaultJWKSFetchTimeout bounds one fetch of the JWKS.
	DefaultJWKSFetchTimeout = 10 * time.Second
	// MaxJWKSBytes is the largest JWKS document read.
	MaxJWKSBytes = 1 << 20
	// MaxJWTBytes is the longest token verified; longer ones are rejected
	// before any parsing.
	MaxJWTBytes = 8 << 10
)

// JWTAlgorithms are the signature algorithms a [JWTConfig] may allow:
// asymmetric only. "none" and the HMAC algorithms (HS256…) are never
// accepted: with HMAC, a verifier that holds a public key would accept
// tokens signed with that public key as the secret.
var JWTAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// DefaultJWTAlgorithms are the algorithms allowed when a [JWTConfig] lists
// none.
var DefaultJWTAlgorithms = []string{"RS256", "ES256", "EdDSA"}

// JWTConfig configures a [JWTVerifier].
type JWTConfig struct {
	// JWKSURL is the identity provider's JWK Set, e.g.
	// https://idp.example.com/.well-known/jwks.json. Required.
	JWKSURL string
	// Issuer must equal the token's iss claim. Required.
	Issuer string
	// Audience must be one of the token's aud values. Required.
	Audience string
	// TenantClaim names the top-level claim that holds the tenant ID (a
	// string, validated by ParseID). Defaults to DefaultTenantClaim.
	TenantClaim string
	// Leeway is the clock skew allowed on exp, nbf and iat. Defaults to
	// DefaultJWTLeeway (30s); at most MaxJWTLeeway. Negative means none.
	Leeway time.Duration
	// Algorithms is the allowlist of signature algorithms, a subset of
	// JWTAlgorithms. Defaults to DefaultJWTAlgorithms.
	Algorithms []string
	// Tenants, when not empty, are the only tenants a token may name: a
	// token whose tenant claim names another (an API-key tenant, a tenant
	// of another identity provider) is refused with ReasonInvalidTenant.
	// Empty accepts any valid tenant ID.
	Tenants []tenancy.ID
	// RefreshInterval is how often the JWKS is fetched again. Defaults to
	// DefaultJWKSRefreshInterval.
	RefreshInterval time.Duration
	// UnknownKIDInterval is the least time between two fetches caused by an
	// unknown kid; tokens with an unknown kid arriving in between are
	// rejected at once. Defaults to DefaultJWKSUnknownKIDInterval.
	UnknownKIDInterval time.Duration
	// FetchTimeout bounds one fetch of the JWKS. Defaults to
	// DefaultJWKSFetchTimeout.
	FetchTimeout time.Duration
	// HTTPClient fetches the JWKS. Defaults to a client of its own.
	HTTPClient *http.Client
	// Logger receives fetch failures. Defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock for exp, nbf and iat. Defaults to time.Now.
	Now func() time.Time
}

func (c JWTConfig) withDefaults() JWTConfig {
	if c.TenantClaim == "" {
		c.TenantClaim = DefaultTenantClaim
	}
	switch {
	case c.Leeway == 0:
		c.Leeway = DefaultJWTLeeway
	case c.Leeway < 0:
		c.Leeway = 0
	}
	if len(c.Algorithms) == 0 {
		c.Algorithms = DefaultJWTAlgorithms
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = DefaultJWKSRefreshInterval
	}
	if c.UnknownKIDInterval <= 0 {
		c.UnknownKIDInterval = DefaultJWKSUnknownKIDInterval
	}
	if c.FetchTimeout <= 0 {
		c.FetchTimeout = DefaultJWKSFetchTimeout
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports the first bad field of c, by name.
func (c JWTConfig) Validate() error {
	if err := CheckJWKSURL(c.JWKSURL); err != nil {
		return fmt.Errorf("auth: JWTConfig.JWKSURL: %w", err)
	}
	switch {
	case strings.TrimSpace(c.Issuer) == "":
		return errors.New("auth: JWTConfig.Issuer is required: the iss claim your identity provider puts into its tokens")
	case strings.TrimSpace(c.Audience) == "":
		return errors.New("auth: JWTConfig.Audience is required: the aud value your identity provider issues for idemguard")
	case c.Leeway > MaxJWTLeeway:
		return fmt.Errorf("auth: JWTConfig.Leeway must be at most %s, got %s", MaxJWTLeeway, c.Leeway)
	}
	for _, a := range c.Algorithms {
		if err := CheckJWTAlgorithm(a); err != nil {
			return fmt.Errorf("auth: JWTConfig.Algorithms: %w", err)
		}
	}
	for i, t := range c.Tenants {
		if _, err := tenancy.ParseID(string(t)); err != nil {
			return fmt.Errorf("auth: JWTConfig.Tenants[%d]: %w", i, err)
		}
	}
	return nil
}

// CheckJWKSURL accepts an absolute http or https URL without user info.
func CheckJWKSURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case s == "":
		return errors.New("is required, e.g. https://idp.example.com/.well-known/jwks.json")
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
		return errors.New("must be an https:// URL, e.g. https://idp.example.com/.well-known/jwks.json")
	case u.User != nil:
		return errors.New("must not carry user info")
	}
	return nil
}

// CheckJWTAlgorithm accepts one of JWTAlgorithms.
func CheckJWTAlgorithm(a string) error {
	if slices.Contains(JWTAlgorithms, a) {
		return nil
	}
	return fmt.Errorf("%q is not allowed; use one of %s (never none, never HMAC)", a, strings.Join(JWTAlgorithms, ", "))
}

// JWTVerifier verifies bearer JWTs and returns their tenant. It is safe for
// concurrent use. Close stops its background JWKS refresh.
type JWTVerifier struct {
	parser  *jwt.Parser
	keys    keyfunc.Keyfunc
	claim   string
	tenants []tenancy.ID // nil: any
	ctx     context.Context
	cancel  context.CancelFunc
}

// NewJWTVerifier validates cfg, fetches the JWKS once and starts refreshing
// it every cfg.RefreshInterval. A first fetch that fails is logged, not
// returned: the service starts (API keys keep working) and tokens are
// rejected until a later fetch succeeds.
func NewJWTVerifier(cfg JWTConfig) (*JWTVerifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	client := *cfg.HTTPClient
	client.Transport = limitedBody{next: cmpTransport(client.Transport), limit: MaxJWKSBytes}

	ctx, cancel := context.WithCancel(context.Background())
	log := cfg.Logger
	no := true
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
		Client:                    &client,
		HTTPTimeout:               cfg.FetchTimeout,
		NoErrorReturnFirstHTTPReq: &no,
		RefreshInterval:           cfg.RefreshInterval,
		RefreshUnknownKID:         rate.NewLimiter(rate.Every(cfg.UnknownKIDInterval), 1),
		// A token with an unknown kid never queues behind the limiter: the
		// wait is refused at once when it would exceed this bound, which
		// also bounds the fetch itself.
		RateLimitWaitMax: cfg.FetchTimeout,
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(_ context.Context, err error) {
				log.Warn("auth: cannot fetch the JWKS; tokens signed by keys not yet cached are rejected",
					slog.String("jwks_url", u), slog.Any("err", err))
			}
		},
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("auth: JWKS %s: %w", cfg.JWKSURL, err)
	}
	parser := jwt.NewParser(
		jwt.WithValidMethods(slices.Clone(cfg.Algorithms)),
		jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithTimeFunc(cfg.Now),
		jwt.WithStrictDecoding(),
	)
	return &JWTVerifier{parser: parser, keys: kf, claim: cfg.TenantClaim, tenants: slices.Clone(cfg.Tenants), ctx: ctx, cancel: cancel}, nil
}

// Close stops the background refresh. Verify keeps working on the cached
// keys but fetches no more.
func (v *JWTVerifier) Close() { v.cancel() }

// Verify checks token and returns the tenant named by its tenant claim.
// Every error is an [*Error] wrapping [ErrInvalidCredentials] whose reason
// says which check failed (expired, wrong issuer, unknown key id, ...); it
// never quotes the token.
func (v *JWTVerifier) Verify(ctx context.Context, token string) (tenancy.ID, error) {
	id, _, err := v.VerifySubject(ctx, token)
	return id, err
}

// VerifySubject is Verify that also returns the token's subject (its sub
// claim, "" without one, or when it is not a string). The subject may name
// a person: keep it out of logs and stores; the REST API turns it into an
// HMAC (Guard.HashActor) before it reaches the audit trail.
func (v *JWTVerifier) VerifySubject(ctx context.Context, token string) (tenancy.ID, string, error) {
	if len(token) > MaxJWTBytes {
		return "", "", newError(ReasonMalformed, fmt.Errorf("jwt: longer than %d bytes", MaxJWTBytes))
	}
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(token, claims, v.keys.KeyfuncCtx(ctx)); err != nil {
		r, why := jwtReason(err)
		return "", "", newError(r, errors.New("jwt: "+why))
	}
	raw, ok := claims[v.claim]
	if !ok {
		return "", "", newError(ReasonInvalidTenant, fmt.Errorf("jwt: no %q claim (the tenant)", v.claim))
	}
	s, ok := raw.(string)
	if !ok {
		return "", "", newError(ReasonInvalidTenant, fmt.Errorf("jwt: the %q claim is not a string", v.claim))
	}
	id, err := tenancy.ParseID(s)
	if err != nil {
		return "", "", newError(ReasonInvalidTenant, fmt.Errorf("jwt: the %q claim: %w", v.claim, err))
	}
	if v.tenants != nil && !slices.Contains(v.tenants, id) {
		// The tenant is not named: the log must not learn who was tried.
		return "", "", newError(ReasonInvalidTenant, fmt.Errorf("jwt: the %q claim names a tenant outside jwt.tenants", v.claim))
	}
	sub, _ := claims["sub"].(string)
	return id, sub, nil
}

// jwtReason names why golang-jwt rejected a token: its reason, and a few
// words fit for a log line. The order matters: a token whose key is unknown
// is also unverifiable, and golang-jwt checks the signature before the
// claims, so a claim reason is only ever given for a genuine token.
func jwtReason(err error) (Reason, string) {
	for _, r := range [...]struct {
		err    error
		reason Reason
		words  string
	}{
		{jwkset.ErrKeyNotFound, ReasonUnknownKeyID, "unknown key id"},
		{jwt.ErrTokenMalformed, ReasonMalformed, "malformed"},
		{jwt.ErrTokenSignatureInvalid, ReasonBadSignature, "signature invalid or algorithm not allowed"},
		{jwt.ErrTokenUnverifiable, ReasonUnknownKeyID, "unverifiable (key unknown and the JWKS not refetched, or unfit for the algorithm)"},
		{jwt.ErrTokenExpired, ReasonExpired, "expired"},
		{jwt.ErrTokenRequiredClaimMissing, ReasonMissingClaim, "a required claim (exp, iss, aud) is missing"},
		{jwt.ErrTokenNotValidYet, ReasonNotYetValid, "not valid yet (nbf)"},
		{jwt.ErrTokenUsedBeforeIssued, ReasonNotYetValid, "issued in the future (iat)"},
		{jwt.ErrTokenInvalidIssuer, ReasonWrongIssuer, "wrong issuer"},
		{jwt.ErrTokenInvalidAudience, ReasonWrongAudience, "wrong audience"},
	} {
		if errors.Is(err, r.err) {
			return r.reason, r.words
		}
	}
	return ReasonRejected, "invalid"
}

// limitedBody caps the JWKS response body.
type limitedBody struct {
	next  http.RoundTripper
	limit int64
}

func (l limitedBody) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.LimitReader(resp.Body, l.limit), resp.Body}
	return resp, nil
}

func cmpTransport(t http.RoundTripper) http.RoundTripper {
	if t == nil {
		return http.DefaultTransport
	}
	return t
}
