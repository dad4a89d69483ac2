package main

import (
	"runtime/debug"
)

// The garbage collector's settings serve takes when the environment sets
// none. A cached replay allocates a few kilobytes that die with the request
// while the live heap stays small (the replay cache, the metrics), so at
// Go's default (GOGC=100) the collector runs many times a second and was the
// largest single cost of a replay the handler does not pay itself: raising
// the percent to 400 cut serve's CPU per cached replay by about a tenth on
// the bench machine (docs/BENCHMARKS.md). The soft memory limit keeps that
// from costing memory where the heap is large: it is about what GOGC=100
// needs with a full replay cache (twice replay_cache_bytes) plus
// serveGCHeadroom, so the heap grows past what the default would reach only
// when the live heap itself does.
const (
	serveGCPercent  = 400
	serveGCHeadroom = 128 << 20
	envGOGC         = "GOGC"
	envGOMEMLIMIT   = "GOMEMLIMIT"
)

// tuneProcessGC is set by main: serve then applies its garbage-collector
// settings to the process. Tests run serve inside the test binary and leave
// the test process's settings alone.
var tuneProcessGC bool

// gcTuning is what serve sets: the GC percent and, when memoryLimit is
// positive, the soft memory limit in bytes.
type gcTuning struct {
	percent     int
	memoryLimit int64
}

// serveGCTuning decides serve's garbage-collector settings from the
// environment and the replay cache's byte bound. ok is false when GOGC is
// set: the operator's setting stands, and serve changes nothing (GOMEMLIMIT
// alone keeps the raised percent under the operator's limit).
func serveGCTuning(getenv func(string) string, replayCacheBytes int64) (t gcTuning, ok bool) {
	if getenv(envGOGC) != "" {
		return gcTuning{}, false
	}
	t.percent = serveGCPercent
	if getenv(envGOMEMLIMIT) == "" {
		t.memoryLimit = 2*replayCacheBytes + serveGCHeadroom
	}
	return t, true
}

// tuneGC logs serve's garbage-collector settings and, in the idemguard
// process (tuneProcessGC), applies them.
func (s *server) tuneGC() {
	t, ok := serveGCTuning(s.env.getenv, s.cfg.ReplayCacheBytes)
	if !ok {
		return
	}
	if tuneProcessGC {
		debug.SetGCPercent(t.percent)
		if t.memoryLimit > 0 {
			debug.SetMemoryLimit(t.memoryLimit)
		}
	}
	attrs := []any{"gc_percent", t.percent}
	if t.memoryLimit > 0 {
		attrs = append(attrs, "memory_limit_bytes", t.memoryLimit)
	}
	s.log.Info("serve: "+envGOGC+" is not set: the garbage collector runs at serve's own percent "+
		"(and, unless "+envGOMEMLIMIT+" is set, under serve's soft memory limit)", attrs...)
}
