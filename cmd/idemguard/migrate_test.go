package main

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/testdb"
)

func TestMigrateLifecycle(t *testing.T) {
	t.Parallel()
	d := testdb.NewEmpty(t)
	environ := map[string]string{EnvMySQLDSN: d.DSN}
	applied := regexp.MustCompile(`(?m)^00001  applied  \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ  00001_create_idempotency_keys\.sql$`)
	pending := regexp.MustCompile(`(?m)^00001  pending  -\s+00001_create_idempotency_keys\.sql$`)

	r := runCLI(t, environ, "migrate", "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, pending, r.stdout)

	r = runCLI(t, environ, "migrate", "up")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stderr, `"msg":"migrate: database is up to date"`, "JSON logs on stderr")

	// --dsn wins over the environment, before or after the action.
	r = runCLI(t, map[string]string{EnvMySQLDSN: "nobody@tcp(127.0.0.1:1)/nothing"}, "migrate", "status", "--dsn", d.DSN)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, applied, r.stdout)

	r = runCLI(t, nil, "migrate", "--dsn", d.DSN, "down")
	require.Equal(t, exitOK, r.code, r.stderr)

	r = runCLI(t, environ, "migrate", "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, pending, r.stdout)

	r = runCLI(t, environ, "migrate", "up")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = runCLI(t, environ, "migrate", "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, applied, r.stdout)
}

func TestMigrateUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"missing DSN", []string{"migrate", "up"}, "pass --dsn or set IDEMGUARD_MYSQL_DSN"},
		{"no action", []string{"migrate"}, "want exactly one action"},
		{"two actions", []string{"migrate", "up", "down"}, "want exactly one action"},
		{"unknown action", []string{"migrate", "sideways"}, `unknown action "sideways"`},
		{"unknown flag", []string{"migrate", "--bogus", "up"}, "flag provided but not defined: -bogus"},
		{"bad lock timeout", []string{"migrate", "--lock-timeout", "0s", "--dsn", "u@tcp(h)/db", "up"}, "--lock-timeout must be positive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, nil, tt.args...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, tt.want)
			require.Empty(t, r.stdout)
		})
	}
}

func TestMigrateDatabaseErrorRedactsPassword(t *testing.T) {
	t.Parallel()
	r := runCLI(t, map[string]string{EnvMySQLDSN: "app:hunter2@tcp(127.0.0.1:1)/idemguard?timeout=1s"}, "migrate", "up")
	require.Equal(t, exitError, r.code, r.stderr)
	require.Contains(t, r.stderr, `"msg":"migrate: connect to database"`)
	require.Contains(t, r.stderr, "app:xxxxx@tcp(127.0.0.1:1)/idemguard")
	require.NotContains(t, r.stderr, "hunter2")
}
