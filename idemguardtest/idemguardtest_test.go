package idemguardtest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/idemguardtest"
	"github.com/idemguard/idemguard/store/memstore"
)

// Every policy this package names is one the guard accepts, and an unknown
// one is refused by New.
func TestReadFirstPoliciesAreTheGuards(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef")
	for _, r := range []idemguardtest.ReadFirst{idemguardtest.ReadFirstAdaptive, idemguardtest.ReadFirstAlways,
		idemguardtest.ReadFirstClientKey, idemguardtest.ReadFirstNever} {
		cfg := idemguard.Config{Store: memstore.New(), Secret: secret}
		idemguardtest.SetReadFirst(&cfg, r)
		g, err := idemguard.New(cfg)
		require.NoError(t, err, r)
		require.NoError(t, g.Close(t.Context()))
	}
	cfg := idemguard.Config{Store: memstore.New(), Secret: secret}
	idemguardtest.SetReadFirst(&cfg, "sometimes")
	_, err := idemguard.New(cfg)
	require.ErrorContains(t, err, "read-first")
}
