// Package testkeys builds a guard's key references for tests, failing the
// test on an error, so the root package's tests and the store conformance
// suite share one copy without idemguardtest exporting it.
package testkeys

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/tenancy"
)

// Client is g.Key(tenant, scope, key), failing the test on an error.
func Client(t testing.TB, g *idemguard.Guard, tenant tenancy.ID, scope, key string) idemguard.Key {
	t.Helper()
	k, err := g.Key(tenant, scope, key)
	require.NoError(t, err)
	return k
}

// Hash is g.KeyOfHash(tenant, scope, hash), failing the test on an error.
func Hash(t testing.TB, g *idemguard.Guard, tenant tenancy.ID, scope, hash string) idemguard.Key {
	t.Helper()
	k, err := g.KeyOfHash(tenant, scope, hash)
	require.NoError(t, err)
	return k
}
