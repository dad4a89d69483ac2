package main

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/migrations"
)

// statusLine matches `idemguard migrate status` for one migration file.
func statusLine(file string, applied bool) *regexp.Regexp {
	version := regexp.QuoteMeta(file[:5])
	if applied {
		return regexp.MustCompile(`(?m)^` + version + `  applied  \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ  ` + regexp.QuoteMeta(file) + `$`)
	}
	return regexp.MustCompile(`(?m)^` + version + `  pending  -\s+` + regexp.QuoteMeta(file) + `$`)
}

func TestMigrateLifecycle(t *testing.T) {
	t.Parallel()
	d := testdb.NewEmpty(t)
	environ := map[string]string{EnvMySQLDSN: d.DSN}
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	newest := files[len(files)-1]
	requireStatus := func(stdout string, applied func(file string) bool) {
		t.Helper()
		require.Len(t, strings.Split(strings.TrimSpace(stdout), "\n"), len(files), "one line per migration")
		for _, f := range files {
			require.Regexp(t, statusLine(f, applied(f)), stdout)
		}
	}
	all := func(string) bool { return true }
	none := func(string) bool { return false }
	allButNewest := func(f string) bool { return f != newest }

	r := runCLI(t, environ, "migrate", "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	requireStatus(r.stdout, none)

	r = runCLI(t, environ, "migrate", "up")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stderr, `"msg":"migrate: database is up to date"`, "JSON logs on stderr")

	// --dsn wins over the environment, before or after the action.
	r = runCLI(t, map[string]string{EnvMySQLDSN: "nobody@tcp(127.0.0.1:1)/nothing"}, "migrate", "status", "--dsn", d.DSN)
	require.Equal(t, exitOK, r.code, r.stderr)
	requireStatus(r.stdout, all)

	r = runCLI(t, nil, "migrate", "--dsn", d.DSN, "down") // one version down: the newest
	require.Equal(t, exitOK, r.code, r.stderr)
	r = runCLI(t, environ, "migrate", "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	requireStatus(r.stdout, allButNewest)

	r = runCLI(t, environ, "migrate", "up")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = runCLI(t, environ, "migrate", "status")
	require.Equal(t, exitOK, r.code, r.stderr)
	requireStatus(r.stdout, all)
}

func TestMigrateUsageErrors(t *testing.T) {
	t.Parallel()
	requireUsageErrors(t, "migrate", []usageCase{
		{"missing DSN", []string{"up"}, "pass --dsn or set IDEMGUARD_MYSQL_DSN"},
		{"no action", nil, "want exactly one action"},
		{"two actions", []string{"up", "down"}, "want exactly one action"},
		{"unknown action", []string{"sideways"}, `unknown action "sideways"`},
		{"unknown flag", []string{"--bogus", "up"}, "flag provided but not defined: -bogus"},
		{"bad lock timeout", []string{"--lock-timeout", "0s", "--dsn", "u@tcp(h)/db", "up"}, "--lock-timeout must be positive"},
	})
}

func TestMigrateDatabaseErrorRedactsPassword(t *testing.T) {
	t.Parallel()
	r := runCLI(t, map[string]string{EnvMySQLDSN: "app:hunter2@tcp(127.0.0.1:1)/idemguard?timeout=1s"}, "migrate", "up")
	require.Equal(t, exitError, r.code, r.stderr)
	require.Contains(t, r.stderr, `"msg":"migrate: connect to database"`)
	require.Contains(t, r.stderr, "app:xxxxx@tcp(127.0.0.1:1)/idemguard")
	require.NotContains(t, r.stderr, "hunter2")
}
