//go:build idemguard_pprof

package main

// The floor process's side of the profiling build (cmd/idemguard's
// pprof_bench.go is serve's): built with -tags idemguard_pprof and run with
// IDEMGUARD_PPROF_DIR set, the HTTP floor serves net/http/pprof on a
// loopback port of its own and writes that address to
// $IDEMGUARD_PPROF_DIR/floor-<pid>.addr, so that serve and its floor can be
// profiled under the same load. The default build has no such listener.

import (
	"os"
	"strconv"

	"github.com/idemguard/idemguard/internal/benchpprof"
)

// profilingBuild says the bench was built with -tags idemguard_pprof (its
// floor processes serve net/http/pprof: -stream-phases reads their traces).
const profilingBuild = true

func init() {
	if os.Getenv(envFloor) == "1" {
		benchpprof.Serve("floor-" + strconv.Itoa(os.Getpid()) + ".addr")
	}
}
