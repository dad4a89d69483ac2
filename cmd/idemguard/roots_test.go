package main

import (
	"crypto/x509"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// On a system without CA roots (the FROM scratch image) the binary still has roots: the fallback
// bundle compiled in. The test re-runs itself in a child process whose environment points the
// system roots at nothing, so this process's own pool is not the one looked at.
func TestCARootsWithoutSystemRoots(t *testing.T) {
	if os.Getenv("IDEMGUARD_TEST_ROOTS_CHILD") == "1" {
		pool, err := x509.SystemCertPool()
		require.NoError(t, err)
		var subjects []string
		for _, s := range pool.Subjects() { //nolint:staticcheck // a test reads the fallback pool, not the platform's
			subjects = append(subjects, string(s))
		}
		require.True(t, slices.ContainsFunc(subjects, func(s string) bool { return strings.Contains(s, "ISRG Root X1") }),
			"no fallback roots: %d subjects", len(subjects))
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCARootsWithoutSystemRoots$", "-test.count=1")
	cmd.Env = append(os.Environ(), "IDEMGUARD_TEST_ROOTS_CHILD=1",
		"SSL_CERT_FILE=/nonexistent/ca.pem", "SSL_CERT_DIR=/nonexistent")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "PASS")
}
