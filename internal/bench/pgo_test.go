package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/benchpprof"
)

func TestPGOEnvironmentIsBenchpprofs(t *testing.T) {
	require.Equal(t, benchpprof.EnvDir, envPprofDir)
	require.Equal(t, benchpprof.EnvCPU, envPprofCPU)
}

func TestServeIsTheProfilingBuildOnlyWhenTheRunRecords(t *testing.T) {
	plain := &env{}
	require.NotContains(t, plain.serveBuildArgs("bin"), pgoTags)
	require.Empty(t, plain.serveProfileEnv())
	require.Empty(t, plain.pprofEnv())

	rec := &env{pprofDir: "/tmp/p", recordCPU: true}
	args := rec.serveBuildArgs("bin")
	require.Equal(t, pgoTags, args[slices.Index(args, "-tags")+1])
	require.Equal(t, "./cmd/idemguard", args[len(args)-1])
	require.ElementsMatch(t, []string{envPprofDir + "=/tmp/p", envPprofCPU + "=1"}, rec.serveProfileEnv())
	require.Equal(t, []string{envPprofDir + "=/tmp/p"}, rec.pprofEnv()) // the floor's

	// Traced (-stream-phases): the profiling build, its address written, no CPU profile.
	traced := &env{pprofDir: "/tmp/p"}
	require.Contains(t, traced.serveBuildArgs("bin"), pgoTags)
	require.Equal(t, []string{envPprofDir + "=/tmp/p"}, traced.serveProfileEnv())
}

// writePGO merges what the processes recorded into one profile that go tool
// pprof reads, and refuses a run that recorded none.
func TestWritePGOMergesTheRecordedProfiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"1.cpu.pprof", "2.cpu.pprof"} {
		f, err := os.Create(filepath.Join(dir, name))
		require.NoError(t, err)
		require.NoError(t, pprof.StartCPUProfile(f))
		pprof.StopCPUProfile()
		require.NoError(t, f.Close())
	}
	out := filepath.Join(t.TempDir(), "default.pgo")
	require.NoError(t, writePGO(context.Background(), dir, out))
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NotEmpty(t, b)

	err = writePGO(context.Background(), t.TempDir(), out)
	require.ErrorContains(t, err, "no serve process recorded a profile")
}
