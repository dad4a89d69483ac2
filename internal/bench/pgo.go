package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// The profile-guided build
//
// `go build ./cmd/idemguard` compiles with cmd/idemguard/default.pgo, a CPU
// profile of serve under the bench's load: the compiler inlines and
// devirtualizes the calls that profile shows hot. -pgo FILE (make pgo)
// makes that profile anew: serve is built with -tags idemguard_pprof, each
// serve process the suites start records its CPU profile from start to exit
// (internal/benchpprof's ProfileCPU), and their merge is written to FILE.

// pgoTags is the build tag of serve's profiling build; envPprofDir and
// envPprofCPU are benchpprof.EnvDir and EnvCPU (pgo_test.go), not imported:
// only the profiling build links net/http/pprof.
const (
	pgoTags     = "idemguard_pprof"
	envPprofDir = "IDEMGUARD_PPROF_DIR"
	envPprofCPU = "IDEMGUARD_PPROF_CPU"
)

// serveBuildArgs are the go build arguments of serve: the profiling build
// when the run records profiles.
func (e *env) serveBuildArgs(out string) []string {
	args := []string{"build", "-o", out}
	if e.pprofDir != "" {
		args = append(args, "-tags", pgoTags)
	}
	return append(args, "./cmd/idemguard")
}

// pprofEnv is the environment that makes a profiling build (serve's, the
// floor's) write its net/http/pprof address to the run's directory (none
// without the directory).
func (e *env) pprofEnv() []string {
	if e.pprofDir == "" {
		return nil
	}
	return []string{envPprofDir + "=" + e.pprofDir}
}

// serveProfileEnv is serve's: pprofEnv and, when the run records profiles,
// its CPU profile (the floor records none).
func (e *env) serveProfileEnv() []string {
	env := e.pprofEnv()
	if env != nil && e.recordCPU {
		env = append(env, envPprofCPU+"=1")
	}
	return env
}

// writePGO merges the profiles the serve processes recorded in dir into
// out (go tool pprof -proto).
func writePGO(ctx context.Context, dir, out string) error {
	profiles, err := filepath.Glob(filepath.Join(dir, "*.cpu.pprof"))
	if err != nil {
		return err
	}
	if len(profiles) == 0 {
		return fmt.Errorf("-pgo: no serve process recorded a profile; run a suite that starts serve (http, stream)")
	}
	var merged, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "pprof", "-proto"}, profiles...)...)
	cmd.Stdout, cmd.Stderr = &merged, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("-pgo: go tool pprof -proto: %w\n%s", err, stderr.Bytes())
	}
	return os.WriteFile(out, merged.Bytes(), 0o644)
}
