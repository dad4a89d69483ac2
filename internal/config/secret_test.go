package config

import (
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
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

func TestPreviousSecrets(t *testing.T) {
	t.Parallel()
	long, other := strings.Repeat("s", 32), strings.Repeat("o", 32)+":colon"

	got, err := PreviousSecrets("")
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = PreviousSecrets(" v1:" + long + " , :" + other + ",")
	require.NoError(t, err)
	require.Equal(t, []idemguard.SecretVersion{{ID: "v1", Secret: []byte(long)}, {ID: "", Secret: []byte(other)}}, got,
		"an empty id names the unnamed secret; a secret may hold a colon")

	for value, want := range map[string]string{
		long:                       "entry 1 has no id",
		"v1:" + long + ",v2:short": `entry 2 (id "v2"): the secret is 5 bytes long`,
		"v/1:" + long:              "entry 1: secret id",
	} {
		_, err := PreviousSecrets(value)
		require.ErrorContains(t, err, want, value)
		require.NotContains(t, err.Error(), long, "the secret itself is never echoed")
	}
}

func TestLoadSecretRotation(t *testing.T) {
	t.Parallel()
	old, next := strings.Repeat("o", 32), strings.Repeat("n", 32)
	base := map[string]string{EnvMode: "development", EnvSecret: next, EnvSecretID: "2026-11",
		EnvPreviousSecrets: "2026-05:" + old}
	c, err := Load("", envOf(base))
	require.NoError(t, err)
	require.Equal(t, "2026-11", c.SecretID)
	require.Equal(t, []idemguard.SecretVersion{{ID: "2026-05", Secret: []byte(old)}}, c.PreviousSecrets)
	require.NoError(t, c.Validate())

	// The id may come from the file; the environment wins.
	path := writeFile(t, "secret_id: from-file\n")
	c, err = Load(path, envOf(map[string]string{EnvSecret: next}))
	require.NoError(t, err)
	require.Equal(t, "from-file", c.SecretID)
	c, err = Load(path, envOf(map[string]string{EnvSecret: next, EnvSecretID: "from-env"}))
	require.NoError(t, err)
	require.Equal(t, "from-env", c.SecretID)

	for name, change := range map[string]map[string]string{
		"same id":     {EnvSecretID: "2026-05"},
		"same secret": {EnvPreviousSecrets: "2026-05:" + next},
		"bad id":      {EnvSecretID: "no spaces"},
	} {
		env := maps.Clone(base)
		maps.Copy(env, change)
		_, err := Load("", envOf(env))
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), old, name)
		require.NotContains(t, err.Error(), next, name)
	}

	// Previous secrets are never read from the file.
	_, err = Load(writeFile(t, "previous_secrets: [\"x:"+old+"\"]\n"), envOf(map[string]string{EnvSecret: next}))
	require.ErrorContains(t, err, "previous_secrets: is never read from the config file")
	require.NotContains(t, err.Error(), old)
}
