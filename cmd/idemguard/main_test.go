package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type result struct {
	code           int
	stdout, stderr string
}

// usageCase is a command line (after the command) that must be refused as
// a usage error, with want in stderr.
type usageCase struct {
	name string
	args []string
	want string
}

// requireUsageErrors runs command with each case's arguments: each exits
// with exitUsage, says its want (and not "hunter2", the password of the
// cases' DSNs) on stderr and writes nothing on stdout.
func requireUsageErrors(t *testing.T, command string, cases []usageCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, nil, append([]string{command}, tt.args...)...)
			require.Equal(t, exitUsage, r.code, r.stderr)
			require.Contains(t, r.stderr, tt.want)
			require.NotContains(t, r.stderr, "hunter2")
			require.Empty(t, r.stdout)
		})
	}
}

// runCLI calls run with the given environment variables only.
func runCLI(t *testing.T, environ map[string]string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr, func(k string) string { return environ[k] })
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func TestRunUsage(t *testing.T) {
	t.Parallel()

	r := runCLI(t, nil)
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "missing command")
	require.Contains(t, r.stderr, "usage: idemguard <command>")

	r = runCLI(t, nil, "frobnicate")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `unknown command "frobnicate"`)
	require.Regexp(t, regexp.MustCompile(`(?m)^\s+migrate\s`), r.stderr, "usage lists the commands")
	require.Empty(t, r.stdout)

	r = runCLI(t, nil, "help")
	require.Equal(t, exitOK, r.code)
	require.Contains(t, r.stdout, "usage: idemguard <command>")
}

// A DSN that does not parse is a usage error (exit 2) in every subcommand that takes one, with
// the password redacted and nothing attempted.
func TestMalformedDSNIsUsageErrorEverywhere(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"app:hunter2@tcp(db:3306", "mysql://app:hunter2@db:3306/idemguard"} {
		for _, args := range [][]string{{"migrate", "up"}, {"migrate", "status"}, {"cleanup"}, {"stats"}, {"serve"}} {
			t.Run(strings.Join(args, " ")+" "+dsn, func(t *testing.T) {
				t.Parallel()
				r := runCLI(t, map[string]string{EnvMySQLDSN: dsn}, args...)
				require.Equal(t, exitUsage, r.code, r.stderr)
				require.Contains(t, r.stderr, "invalid DSN")
				require.NotContains(t, r.stderr, "hunter2")
				require.Empty(t, r.stdout)
			})
		}
	}
}
