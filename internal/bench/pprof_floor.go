//go:build idemguard_pprof

package main

// The floor process's side of the profiling build (cmd/idemguard's
// pprof_bench.go is serve's): built with -tags idemguard_pprof and run with
// IDEMGUARD_PPROF_DIR set, the HTTP floor serves net/http/pprof on a
// loopback port of its own and writes that address to
// $IDEMGUARD_PPROF_DIR/floor-<pid>.addr, so that serve and its floor can be
// profiled under the same load. The default build has no such listener.

import (
	"net"
	"net/http"
	_ "net/http/pprof" // registers on http.DefaultServeMux
	"os"
	"path/filepath"
	"strconv"
)

func init() {
	dir := os.Getenv("IDEMGUARD_PPROF_DIR")
	if dir == "" || os.Getenv(envFloor) != "1" {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return
	}
	_ = os.WriteFile(filepath.Join(dir, "floor-"+strconv.Itoa(os.Getpid())+".addr"), []byte(ln.Addr().String()), 0o600)
	go func() { _ = http.Serve(ln, nil) }()
}
