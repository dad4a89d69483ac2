package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemguard/idemguard/internal/testdb"
)

// repoRoot is the repository's top folder, seen from this package's folder.
const repoRoot = ".."

// needTool returns the path of the named program. Without it the test skips (noting the skip in
// IDEMGUARD_TEST_SKIP_LOG, which make test counts), or fails when CI=true: CI never passes by
// skipping, and .ci/run installs every tool these tests use.
func needTool(t *testing.T, name, why string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := name + " is not installed: " + why + " (.ci/run installs it)"
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true and " + msg)
	}
	if log := os.Getenv(testdb.EnvSkipLog); log != "" {
		if f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600); err == nil {
			_, _ = f.WriteString(strings.ReplaceAll(t.Name(), "\n", " ") + " (" + name + ")\n")
			_ = f.Close()
		}
	}
	t.Skip(msg)
	return ""
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binaryPath != "" {
		_ = os.RemoveAll(filepath.Dir(binaryPath))
	}
	os.Exit(code)
}

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
	binaryOut  []byte
)

// binary builds cmd/idemguard once per test process (its flag sets answer -h).
func binary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "idemguard-deploy-test-")
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "idemguard")
		cmd := exec.Command("go", "build", "-o", binaryPath, "./cmd/idemguard")
		cmd.Dir = repoRoot
		binaryOut, binaryErr = cmd.CombinedOutput()
	})
	if binaryErr != nil {
		t.Fatalf("go build ./cmd/idemguard: %v\n%s", binaryErr, binaryOut)
	}
	return binaryPath
}
