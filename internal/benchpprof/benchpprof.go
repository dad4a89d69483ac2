// Package benchpprof serves net/http/pprof for the bench's profiling build.
// Only files built with -tags idemguard_pprof import it (serve's and the
// HTTP floor's), so no default build links net/http/pprof or opens its
// listener.
package benchpprof

import (
	"net"
	"net/http"
	_ "net/http/pprof" // registers on http.DefaultServeMux
	"os"
	"path/filepath"
)

// Serve serves net/http/pprof on a loopback port of its own when the
// environment names a directory (IDEMGUARD_PPROF_DIR), and writes that
// address to the file name there, for the bench's profiling runs to find.
// It does nothing without the directory, or when it cannot listen.
func Serve(name string) {
	dir := os.Getenv("IDEMGUARD_PPROF_DIR")
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
