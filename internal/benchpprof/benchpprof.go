// Package benchpprof serves net/http/pprof for the bench's profiling build,
// and records a process's CPU profile for the profile-guided build. Only
// files built with -tags idemguard_pprof import it (serve's and the HTTP
// floor's), so no default build links net/http/pprof or opens its listener.
package benchpprof

import (
	"net"
	"net/http"
	_ "net/http/pprof" // registers on http.DefaultServeMux
	"os"
	"path/filepath"
	"runtime/pprof"
)

// Environment of the profiling build.
const (
	// EnvDir names the directory the addresses and profiles are written to.
	EnvDir = "IDEMGUARD_PPROF_DIR"
	// EnvCPU, "1", asks ProfileCPU to record.
	EnvCPU = "IDEMGUARD_PPROF_CPU"
)

// Serve serves net/http/pprof on a loopback port of its own when the
// environment names a directory (EnvDir), and writes that address to the
// file name there, for the bench's profiling runs to find. It does nothing
// without the directory, or when it cannot listen.
func Serve(name string) {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return
	}
	_ = os.WriteFile(filepath.Join(dir, name), []byte(ln.Addr().String()), 0o600)
	go func() { _ = http.Serve(ln, nil) }()
}

// ProfileCPU records the process's CPU profile, from now until the returned
// stop is called, to the file name in EnvDir when EnvCPU is "1" (the bench's
// -pgo run merges them into cmd/idemguard/default.pgo). Otherwise, or when
// the file cannot be made or the profile started (one runs already), it
// records nothing, leaves no file, and stop does nothing.
func ProfileCPU(name string) (stop func()) {
	dir := os.Getenv(EnvDir)
	if dir == "" || os.Getenv(EnvCPU) != "1" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		// No empty file for the merge to choke on.
		_ = f.Close()
		_ = os.Remove(f.Name())
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}
