//go:build idemguard_pprof

package main

// A profiling build for the bench, never the production binary: built with
// -tags idemguard_pprof (e.g. GOFLAGS=-tags=idemguard_pprof for `make bench`,
// whose http suite builds ./cmd/idemguard and passes its environment on) and
// run with IDEMGUARD_PPROF_DIR set, each process serves net/http/pprof on a
// loopback port of its own and writes that address to
// $IDEMGUARD_PPROF_DIR/<pid>.addr. The default build has no such listener.
// With IDEMGUARD_PPROF_CPU=1 too, it records its CPU profile from start to
// exit in $IDEMGUARD_PPROF_DIR/<pid>.cpu.pprof (the bench's -pgo run).

import (
	"os"
	"strconv"

	"github.com/idemguard/idemguard/internal/benchpprof"
)

func init() {
	pid := strconv.Itoa(os.Getpid())
	benchpprof.Serve(pid + ".addr")
	stopProfile = benchpprof.ProfileCPU(pid + ".cpu.pprof")
}
