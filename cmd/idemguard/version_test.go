package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// highestMigrationOnDisk reads ../../migrations independently of the embedded FS.
func highestMigrationOnDisk(t *testing.T) int64 {
	t.Helper()
	files, err := filepath.Glob("../../migrations/*.sql")
	require.NoError(t, err)
	var highest int64
	for _, f := range files {
		n, err := strconv.ParseInt(regexp.MustCompile(`^\d+`).FindString(filepath.Base(f)), 10, 64)
		require.NoError(t, err, f)
		highest = max(highest, n)
	}
	require.NotZero(t, highest)
	return highest
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		r := runCLI(t, nil, args...)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Empty(t, r.stderr)
		require.Regexp(t, `^idemguard \S+\ncommit: \S+.*\ndate: \S+\n`, r.stdout)
		require.Contains(t, r.stdout, "\ngo: "+runtime.Version()+"\n")
		require.Contains(t, r.stdout, "\nschema: "+strconv.FormatInt(highestMigrationOnDisk(t), 10)+" ")
	}
	r := runCLI(t, nil, "version", "extra")
	require.Equal(t, exitUsage, r.code)
	r = runCLI(t, nil, "help")
	require.Regexp(t, `(?m)^\s+version\s`, r.stdout)
}

func TestSchemaVersionIsTheHighestMigration(t *testing.T) {
	t.Parallel()
	v, err := schemaVersion(fstest.MapFS{
		"00001_a.sql": {}, "00010_c.sql": {}, "00002_b.sql": {}, "README.md": {},
	})
	require.NoError(t, err)
	require.Equal(t, int64(10), v)
	_, err = schemaVersion(fstest.MapFS{})
	require.Error(t, err)
}

// A release build sets the version, commit and date with -ldflags -X, as make build and
// goreleaser do.
func TestVersionFromLdflags(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "idemguard")
	build := exec.Command("go", "build", "-o", bin,
		"-ldflags", "-X main.version=v9.8.7-test -X main.commit=0123abcd -X main.date=2026-11-27T18:00:00Z", ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))
	out, err = exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	require.Regexp(t, `^idemguard v9\.8\.7-test\ncommit: 0123abcd\ndate: 2026-11-27T18:00:00Z\ngo: go`, string(out))
	_ = os.Remove(bin)
}
