package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSecret(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("s", 32)

	_, _, err := Secret("", false)
	require.ErrorContains(t, err, "IDEMPOTENCY_SECRET is not set")
	_, _, err = Secret("too-short", false)
	require.ErrorContains(t, err, "IDEMPOTENCY_SECRET is 9 bytes long")
	require.NotContains(t, err.Error(), "too-short", "the secret itself is never echoed")
	_, _, err = Secret("too-short", true)
	require.ErrorContains(t, err, "IDEMPOTENCY_SECRET", "a short secret set on purpose is an error in development too")

	s, generated, err := Secret(long, false)
	require.NoError(t, err)
	require.False(t, generated)
	require.Equal(t, long, string(s))

	a, generated, err := Secret("", true)
	require.NoError(t, err)
	require.True(t, generated)
	require.Len(t, a, 32)
	b, _, err := Secret("", true)
	require.NoError(t, err)
	require.NotEqual(t, a, b, "a fresh secret per process")
}
