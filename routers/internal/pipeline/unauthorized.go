package pipeline

// The 401 answers: which check failed, and the RFC 6750 challenge.

import (
	"errors"
	"net/http"

	"github.com/idemguard/idemguard/routers/auth"
)

// Details of a 401 whose error is not an *auth.Error: a team's own routes,
// whose authentication is the team's. They name no scheme, since the
// middleware does not know which one the team configured.
const (
	DetailNoTenant = "the request is not authenticated: this route's authentication identified no tenant"
	DetailRejected = "the request's credentials were not accepted by this route's authentication"
)

// unauthorizedDetail is the problem detail of an authentication failure:
// the reason's own detail when err carries one (auth.Error), otherwise a
// detail that names no credential scheme.
func unauthorizedDetail(err error) string {
	var ae *auth.Error
	switch {
	case errors.As(err, &ae):
		return ae.Detail()
	case errors.Is(err, auth.ErrInvalidCredentials):
		return DetailRejected
	}
	return DetailNoTenant
}

// setChallenge sets WWW-Authenticate for an authentication failure found by
// idemguard's bearer authentication (an auth.Error). Another failure, on a
// team's own route, gets none: the scheme is the team's, not ours to name.
func setChallenge(h http.Header, err error) {
	var ae *auth.Error
	if errors.As(err, &ae) {
		h.Set("WWW-Authenticate", auth.Challenge(err))
	}
}
