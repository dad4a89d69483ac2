package deploy

import (
	"debug/buildinfo"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// pgoSetting is the build setting that names the profile a binary was
// compiled with.
const pgoSetting = "-pgo"

// pgoOf is the profile bin was compiled with ("" for none).
func pgoOf(t *testing.T, bin string) string {
	t.Helper()
	info, err := buildinfo.ReadFile(bin)
	require.NoError(t, err)
	for _, s := range info.Settings {
		if s.Key == pgoSetting {
			return s.Value
		}
	}
	return ""
}

// A plain go build of ./cmd/idemguard, as make build, make image and the
// release run it, compiles with the committed cmd/idemguard/default.pgo
// (make pgo records it; docs/BENCHMARKS.md says what it is worth).
func TestBinaryIsTheProfileGuidedBuild(t *testing.T) {
	t.Parallel()
	profile := filepath.Join(repoRoot, "cmd", "idemguard", "default.pgo")
	st, err := os.Stat(profile)
	require.NoError(t, err, "cmd/idemguard/default.pgo is committed (make pgo)")
	require.NotZero(t, st.Size())
	pgo := pgoOf(t, binary(t))
	require.True(t, strings.HasSuffix(filepath.ToSlash(pgo), "cmd/idemguard/default.pgo"),
		"the binary's %s setting is %q, want cmd/idemguard/default.pgo", pgoSetting, pgo)
}
