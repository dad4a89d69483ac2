package testdb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The search order after the environment variable: Docker, then the local server, then none.
func TestLocateOrder(t *testing.T) {
	t.Parallel()
	var tried []string
	docker := func(up bool) func() bool {
		return func() bool { tried = append(tried, "docker"); return up }
	}
	start := func() (string, error) { tried = append(tried, "start"); return "root:pw@tcp(container:3306)/", nil }
	local := func(up bool) func(string) bool {
		return func(dsn string) bool { tried = append(tried, "local "+dsn); return up }
	}

	dsn, err := locate(docker(true), start, local(true))
	require.NoError(t, err)
	require.Equal(t, "root:pw@tcp(container:3306)/", dsn)
	require.Equal(t, []string{"docker", "start"}, tried, "Docker first; the local server is not even tried")

	tried = nil
	dsn, err = locate(docker(false), start, local(true))
	require.NoError(t, err)
	require.Equal(t, LocalDSN, dsn)
	require.Equal(t, []string{"docker", "local " + LocalDSN}, tried)

	tried = nil
	dsn, err = locate(docker(false), start, local(false))
	require.NoError(t, err)
	require.Empty(t, dsn, "nothing answers: skip (or fail under CI)")

	failing := func() (string, error) { return "", errors.New("pull failed") }
	_, err = locate(docker(true), failing, local(true))
	require.ErrorContains(t, err, "pull failed", "a Docker engine that cannot start MySQL is an error, not a silent fallback")
}

// The probe gives up quickly on an address where nothing answers, and finds a server that does.
func TestProbe(t *testing.T) {
	t.Parallel()
	start := time.Now()
	require.False(t, probe("root@tcp(127.0.0.1:1)/test"))
	require.Less(t, time.Since(start), LocalProbeTimeout+time.Second)
	require.False(t, probe("not a dsn"))

	if dsn := os.Getenv(EnvDSN); dsn != "" {
		require.True(t, probe(dsn), "the server of %s answers", EnvDSN)
	}
}

// fakeTB records what decide did instead of stopping the test.
type fakeTB struct {
	testing.TB
	name    string
	failed  string
	skipped string
}

func (f *fakeTB) Helper()                         {}
func (f *fakeTB) Name() string                    { return f.name }
func (f *fakeTB) Fatal(args ...any)               { f.failed = fmt.Sprint(args...) }
func (f *fakeTB) Fatalf(format string, a ...any)  { f.failed = fmt.Sprintf(format, a...) }
func (f *fakeTB) Skip(args ...any)                { f.skipped = fmt.Sprint(args...) }
func (f *fakeTB) Logf(format string, args ...any) {}

func TestDecide(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "skips")

	tb := &fakeTB{name: "TestA"}
	require.Equal(t, "dsn", decide(tb, "dsn", nil, true, log))
	require.Empty(t, tb.failed+tb.skipped)

	tb = &fakeTB{name: "TestB"}
	require.Empty(t, decide(tb, "", nil, true, log))
	require.Contains(t, tb.failed, "CI=true and no MySQL for tests")
	require.Empty(t, tb.skipped)

	tb = &fakeTB{name: "TestC"}
	decide(tb, "", errors.New("boom"), false, log)
	require.Contains(t, tb.failed, "boom")

	for _, name := range []string{"TestD", "TestE/sub"} {
		tb = &fakeTB{name: name}
		require.Empty(t, decide(tb, "", nil, false, log))
		require.Empty(t, tb.failed)
		require.Contains(t, tb.skipped, "no MySQL for tests: set "+EnvDSN)
		require.Contains(t, tb.skipped, "127.0.0.1:3306")
	}
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	require.Equal(t, "TestD\nTestE/sub\n", string(b), "one line per skip, none for a failure")

	tb = &fakeTB{name: "TestF"}
	decide(tb, "", nil, false, "")
	require.NotEmpty(t, tb.skipped, "no log file set: a skip still skips")
	require.False(t, strings.Contains(tb.skipped, "\n"))
}
