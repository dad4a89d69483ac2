package auth

// Why a request was not authenticated.

import "errors"

// Reason says which check an authentication failure failed. Each reason has
// its own problem detail ([Error.Detail]) and its own RFC 6750
// error_description ([Challenge]), so a client can tell "get a new token"
// from a misconfiguration. None of them says what the service expects (no
// issuer, audience, key or tenant is named): that would help an attacker,
// not the caller.
type Reason string

// The reasons. ReasonMissing wraps [ErrNoCredentials]; every other reason
// wraps [ErrInvalidCredentials].
const (
	// ReasonMissing: no Authorization header, or one whose scheme is not Bearer.
	ReasonMissing Reason = "missing_credentials"
	// ReasonMalformed: a bearer token that is empty, holds white space, is
	// not a well-formed JWT or is too long; also more than one
	// Authorization header.
	ReasonMalformed Reason = "malformed_token"
	// ReasonUnknownAPIKey: the token matches no configured API key.
	ReasonUnknownAPIKey Reason = "unknown_api_key"
	// ReasonExpired: the JWT's exp is past (beyond the leeway).
	ReasonExpired Reason = "token_expired"
	// ReasonNotYetValid: the JWT's nbf or iat is in the future (beyond the leeway).
	ReasonNotYetValid Reason = "token_not_yet_valid"
	// ReasonWrongIssuer: the JWT's iss is not the configured issuer.
	ReasonWrongIssuer Reason = "wrong_issuer"
	// ReasonWrongAudience: none of the JWT's aud values is the configured audience.
	ReasonWrongAudience Reason = "wrong_audience"
	// ReasonUnknownKeyID: the JWT names a kid the identity provider's key
	// set does not hold (even after a refetch, when one was allowed).
	ReasonUnknownKeyID Reason = "unknown_key_id"
	// ReasonBadSignature: the JWT's signature does not verify, or its
	// algorithm is not allowed (none, HMAC, or outside the allowlist).
	ReasonBadSignature Reason = "bad_signature"
	// ReasonMissingClaim: the JWT lacks a required claim (exp, iss or aud;
	// sub on a scope whose keys are kept per user).
	ReasonMissingClaim Reason = "missing_claim"
	// ReasonInvalidTenant: the JWT's tenant claim is absent, not a string,
	// not a valid tenant ID, or names a tenant the identity provider may not
	// name (JWTConfig.Tenants).
	ReasonInvalidTenant Reason = "invalid_tenant_claim"
	// ReasonRejected: the credential was rejected for another reason (e.g.
	// JWTs accepted but no JWKS configured).
	ReasonRejected Reason = "rejected"
)

// reasonTexts are, per reason, the problem detail and the
// error_description. The descriptions hold only the characters RFC 6750
// §3 allows in a quoted value (printable ASCII without " and \).
var reasonTexts = map[Reason]struct{ detail, description string }{
	ReasonMissing: {"the request carries no credentials; send them as Authorization: Bearer <credential>",
		"no credentials"},
	ReasonMalformed: {"the bearer credential is malformed (send exactly one Authorization: Bearer header with one token)",
		"the token is malformed"},
	ReasonUnknownAPIKey: {"the API key is not recognised; check that it is a current key of your tenant",
		"unknown API key"},
	ReasonExpired: {"the token has expired; get a new one from your identity provider and retry",
		"the token has expired"},
	ReasonNotYetValid: {"the token is not valid yet (nbf or iat in the future); check the clocks of your identity provider and this client",
		"the token is not valid yet"},
	ReasonWrongIssuer: {"the token was issued by an issuer this service does not trust",
		"the token issuer is not trusted"},
	ReasonWrongAudience: {"the token was not issued for this service (its audience does not include it)",
		"the token audience is not this service"},
	ReasonUnknownKeyID: {"the token is signed with a key id the identity provider's key set does not hold; if its keys were just rotated, retry in a minute",
		"unknown signing key id"},
	ReasonBadSignature: {"the token's signature does not verify, or its algorithm is not allowed",
		"the token signature is invalid"},
	ReasonMissingClaim: {"the token lacks a required claim (exp, iss or aud; sub where keys are kept per user)",
		"the token lacks a required claim"},
	ReasonInvalidTenant: {"the token's tenant claim is missing or is not a valid tenant ID",
		"the token names no valid tenant"},
	ReasonRejected: {"the credential was not accepted",
		"the credential was not accepted"},
}

// Error is an authentication failure and its reason. Its message (for the
// log) adds the cause; it never contains the token. [Error.Detail] is the
// text for the client. errors.Is matches [ErrNoCredentials] for
// ReasonMissing and [ErrInvalidCredentials] for every other reason.
type Error struct {
	Reason Reason
	// Err is the cause, for the log; nil when the reason says it all.
	Err error
}

func newError(r Reason, cause error) *Error { return &Error{Reason: r, Err: cause} }

func (e *Error) Error() string {
	msg := e.class().Error() + ": " + e.description()
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the class sentinel and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.class()}
	}
	return []error{e.class(), e.Err}
}

func (e *Error) class() error {
	if e.Reason == ReasonMissing {
		return ErrNoCredentials
	}
	return ErrInvalidCredentials
}

func (e *Error) description() string {
	if t, ok := reasonTexts[e.Reason]; ok {
		return t.description
	}
	return reasonTexts[ReasonRejected].description
}

// Detail is the problem detail for the client: what failed and what to do,
// naming nothing the service expects.
func (e *Error) Detail() string {
	if t, ok := reasonTexts[e.Reason]; ok {
		return t.detail
	}
	return reasonTexts[ReasonRejected].detail
}

// ReasonOf returns the reason of err: that of the *Error it wraps, else
// ReasonMissing for [ErrNoCredentials], ReasonRejected for
// [ErrInvalidCredentials], and "" for any other error.
func ReasonOf(err error) Reason {
	var e *Error
	switch {
	case errors.As(err, &e):
		if _, ok := reasonTexts[e.Reason]; ok {
			return e.Reason
		}
		return ReasonRejected
	case errors.Is(err, ErrNoCredentials):
		return ReasonMissing
	case errors.Is(err, ErrInvalidCredentials):
		return ReasonRejected
	}
	return ""
}

// Challenge returns the WWW-Authenticate value for an authentication
// failure (RFC 6750 §3): `Bearer realm="idemguard"` when no credentials
// were sent (§3.1: no error attribute then), otherwise
// `Bearer realm="idemguard", error="invalid_token", error_description="…"`
// with the description of the failure's reason.
func Challenge(err error) string {
	r := ReasonOf(err)
	if r == ReasonMissing || r == "" {
		return `Bearer realm="` + Realm + `"`
	}
	return `Bearer realm="` + Realm + `", error="invalid_token", error_description="` + reasonTexts[r].description + `"`
}
