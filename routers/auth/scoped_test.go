package auth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/tenancy"
)

// TestScopedKey: a key added with WithScopedKey is recognised only on its
// scopes (and routes of no scope); elsewhere, and by Identify and
// Authenticate, like an unknown key. It is never added to a configured
// tenant, nor with a digest configured already.
func TestScopedKey(t *testing.T) {
	t.Parallel()
	base, err := auth.NewAuthenticator(map[tenancy.ID][]string{"acme": {auth.HashAPIKey("acme-key")}})
	require.NoError(t, err)
	a, err := base.WithScopedKey("demo", "demo", auth.HashAPIKey("public"), []string{"demo", "demo-job"})
	require.NoError(t, err)
	creds := &auth.Credentials{APIKeys: a}
	req := func(token string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		return r
	}
	ctx := context.Background()
	for _, scope := range []string{"demo", "demo-job", ""} {
		p, err := creds.AuthenticateScope(ctx, req("public"), scope, nil)
		require.NoError(t, err, scope)
		require.Equal(t, tenancy.ID("demo"), p.Tenant)
	}
	_, err = creds.AuthenticateScope(ctx, req("public"), "chat", nil)
	var ae *auth.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, auth.ReasonUnknownAPIKey, ae.Reason)
	_, err = creds.Authenticate(ctx, req("public"), nil)
	require.ErrorAs(t, err, &ae)
	_, _, ok := a.Identify("public")
	require.False(t, ok, "Identify knows no scope: a scoped key matches nothing there")
	p, err := creds.AuthenticateScope(ctx, req("acme-key"), "chat", nil)
	require.NoError(t, err)
	require.Equal(t, tenancy.ID("acme"), p.Tenant)
	_, _, ok = base.Identify("public")
	require.False(t, ok, "the base authenticator is not changed")

	_, err = base.WithScopedKey("acme", "demo", auth.HashAPIKey("public"), []string{"demo"})
	require.ErrorContains(t, err, "never added to a configured tenant")
	_, err = base.WithScopedKey("demo", "demo", auth.HashAPIKey("acme-key"), []string{"demo"})
	require.ErrorContains(t, err, "the same key is configured for tenant \"acme\"")
	_, err = base.WithScopedKey("demo", "demo", auth.HashAPIKey("public"), nil)
	require.ErrorContains(t, err, "at least one scope")
}
