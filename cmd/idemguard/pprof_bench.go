//go:build idemguard_pprof

package main

// A profiling build for the bench, never the production binary: built with
// -tags idemguard_pprof (e.g. GOFLAGS=-tags=idemguard_pprof for `make bench`,
// whose http suite builds ./cmd/idemguard and passes its environment on) and
// run with IDEMGUARD_PPROF_DIR set, each process serves net/http/pprof on a
// loopback port of its own and writes that address to
// $IDEMGUARD_PPROF_DIR/<pid>.addr. The default build has no such listener.

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
	if dir == "" {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return
	}
	_ = os.WriteFile(filepath.Join(dir, strconv.Itoa(os.Getpid())+".addr"), []byte(ln.Addr().String()), 0o600)
	go func() { _ = http.Serve(ln, nil) }()
}
