package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Without GOGC, serve raises the GC percent and, without GOMEMLIMIT,
// bounds the heap by twice the replay cache plus the headroom; an
// operator's GOGC stands, and their GOMEMLIMIT replaces serve's limit.
func TestServeGCTuning(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	const cache = 64 << 20
	tn, ok := serveGCTuning(env(), cache)
	require.True(t, ok)
	require.Equal(t, gcTuning{percent: 400, memoryLimit: 2*cache + 128<<20}, tn)

	tn, ok = serveGCTuning(env(envGOMEMLIMIT, "1GiB"), cache)
	require.True(t, ok)
	require.Equal(t, gcTuning{percent: 400}, tn, "the operator's GOMEMLIMIT is the limit")

	for _, v := range []string{"100", "off", "50"} {
		_, ok = serveGCTuning(env(envGOGC, v, envGOMEMLIMIT, ""), cache)
		require.False(t, ok, "GOGC=%s is the operator's choice", v)
	}
}

// serve says at start what it set; with GOGC set it says nothing of it.
func TestServeLogsItsGCTuning(t *testing.T) {
	t.Parallel()
	gcLine := func(s *served) map[string]any {
		sc := bufio.NewScanner(strings.NewReader(s.stderr.String()))
		for sc.Scan() {
			var l map[string]any
			if json.Unmarshal(sc.Bytes(), &l) == nil && strings.HasPrefix(l["msg"].(string), "serve: GOGC is not set") {
				return l
			}
		}
		return nil
	}
	cfg := "replay_cache_bytes: 2097152\n"
	l := gcLine(startServe(t, map[string]string{"IDEMGUARD_LISTEN": "127.0.0.1:0"}, cfg))
	require.NotNil(t, l)
	require.EqualValues(t, 400, l["gc_percent"])
	require.EqualValues(t, 2*2097152+128<<20, l["memory_limit_bytes"])

	l = gcLine(startServe(t, map[string]string{"IDEMGUARD_LISTEN": "127.0.0.1:0", "GOMEMLIMIT": "1GiB"}, cfg))
	require.NotNil(t, l)
	require.EqualValues(t, 400, l["gc_percent"])
	require.NotContains(t, l, "memory_limit_bytes")

	require.Nil(t, gcLine(startServe(t, map[string]string{"IDEMGUARD_LISTEN": "127.0.0.1:0", "GOGC": "100"}, cfg)))
}

// In the idemguard process (main sets tuneProcessGC) serve applies what it
// logs. The test re-runs itself in a child process, so that this process's
// collector is not the one changed.
func TestServeAppliesItsGCTuning(t *testing.T) {
	if os.Getenv("IDEMGUARD_TEST_GC_CHILD") == "1" {
		tuneProcessGC = true
		startServe(t, map[string]string{"IDEMGUARD_LISTEN": "127.0.0.1:0"}, "replay_cache_bytes: 2097152\n")
		percent := debug.SetGCPercent(100)
		debug.SetGCPercent(percent)
		require.Equal(t, 400, percent)
		require.EqualValues(t, 2*2097152+128<<20, debug.SetMemoryLimit(-1)) // -1 reads it
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeAppliesItsGCTuning$", "-test.count=1")
	cmd.Env = append(os.Environ(), "IDEMGUARD_TEST_GC_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "PASS")
}
