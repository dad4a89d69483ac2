package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestModeMissingWithProductionSettingsRefuses: a configuration with a
// database, API keys, JWT settings or non-demo scopes and no mode refuses to
// load and says to set the mode; it never falls back to development mode
// (public demo key, automatic migrations).
func TestModeMissingWithProductionSettingsRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		names      string
	}{
		{"production file without its mode line", "mysql_dsn: u:p@tcp(db:3306)/x\napi_keys: {acme: [" + digestA + "]}\n" +
			"openai: {model: m}\nscopes: [{name: chat, operation: openai_chat}]\n", nil,
			"mysql_dsn, api_keys, scopes with operations other than demo"},
		{"dsn from the environment", "", map[string]string{EnvMySQLDSN: "u:p@tcp(db:3306)/x"}, "mysql_dsn"},
		{"api keys from the environment", "", map[string]string{EnvAPIKeys: "acme:" + digestA}, "api_keys"},
		{"jwt", "jwt: {jwks_url: 'https://idp.example/jwks', issuer: i, audience: a}\n", nil, "jwt"},
		{"a real scope", "upstream: {url: 'https://x.example/'}\nscopes: [{name: copy, operation: http_json}]\n", nil,
			"scopes with operations other than demo"},
		{"a scope named demo that is not the demo", "openai: {model: m}\nscopes: [{name: demo, operation: openai_chat}]\n", nil,
			"scopes with operations other than demo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := ""
			if tc.file != "" {
				path = writeFile(t, tc.file)
			}
			env := map[string]string{EnvSecret: secret}
			for k, v := range tc.env {
				env[k] = v
			}
			c, err := Load(path, envOf(env))
			require.Nil(t, c, "never a development configuration")
			require.ErrorContains(t, err, "mode: is not set, but the configuration has production settings ("+tc.names+"): set mode: production")

			// Asking explicitly works either way.
			env[EnvMode] = "development"
			c, err = Load(path, envOf(env))
			require.NoError(t, err)
			require.Equal(t, Development, c.Mode)
		})
	}

	// Nothing production-like: development by default, demo scopes included.
	path := writeFile(t, "listen: 127.0.0.1:9000\nscopes: [{name: slow, operation: demo, delay: 1s}]\n")
	c, err := Load(path, envOf(nil))
	require.NoError(t, err)
	require.Equal(t, Development, c.Mode)
}

// TestLoadAuthFailures: the failed-authentication limit's defaults, the
// file's values, and its bounds named by setting.
func TestLoadAuthFailures(t *testing.T) {
	t.Parallel()
	c, err := Load("", envOf(nil))
	require.NoError(t, err)
	require.Equal(t, AuthFailures{Max: 20, Window: time.Minute, MaxClients: 10_000}, c.AuthFailures)
	c, err = Load(writeFile(t, "auth_failures: {max: -1, window: 10m, max_clients: 5}\n"), envOf(nil))
	require.NoError(t, err)
	require.Equal(t, AuthFailures{Max: -1, Window: 10 * time.Minute, MaxClients: 5}, c.AuthFailures)
	_, err = Load(writeFile(t, "auth_failures: {max: 0, window: 10ms, max_clients: 0}\n"), envOf(nil))
	require.ErrorContains(t, err, "auth_failures.max: must be between 1 and 10000, or -1 (no limit), got 0")
	require.ErrorContains(t, err, "auth_failures.window: must be between 1s and 24h0m0s, got 10ms")
	require.ErrorContains(t, err, "auth_failures.max_clients: must be between 1 and 1000000, got 0")
}
