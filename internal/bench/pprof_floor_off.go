//go:build !idemguard_pprof

package main

// profilingBuild is false in the default build: its floor processes serve no
// net/http/pprof (pprof_floor.go).
const profilingBuild = false
