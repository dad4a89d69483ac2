package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// repoRoot is where the Makefile is.
const repoRoot = "../.."

func makeCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("make is not installed")
		}
		t.Skip("make is not installed")
	}
	cmd := exec.Command("make", append([]string{"--no-print-directory", "-C", repoRoot}, args...)...)
	cmd.Env = os.Environ()
	return cmd
}

// `IDEMGUARD_LISTEN=... make run` listens there; without it, on 127.0.0.1:8080.
func TestMakeRunHonoursListen(t *testing.T) {
	t.Parallel()
	cmd := makeCmd(t, "-n", "run")
	cmd.Env = append(cmd.Env, "IDEMGUARD_LISTEN=127.0.0.1:18081")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "IDEMGUARD_LISTEN='127.0.0.1:18081'")
	require.NotContains(t, string(out), "8080")

	cmd = makeCmd(t, "-n", "run")
	cmd.Env = append(cmd.Env, "IDEMGUARD_LISTEN=")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "IDEMGUARD_LISTEN='127.0.0.1:8080'", "the default")
}

// make run for real on 127.0.0.1:0: serve prints the port it bound, and answers there.
func TestMakeRunPrintsTheBoundAddress(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	cmd := makeCmd(t, "run", "BIN="+filepath.Join(t.TempDir(), "idemguard"))
	cmd.Env = append(cmd.Env, "IDEMGUARD_LISTEN=127.0.0.1:0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // make, env and serve in one group
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	stop := func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Error("make run did not stop within 30s of SIGTERM")
		}
	})

	addrs := make(chan string, 1)
	var printed strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			printed.WriteString(sc.Text() + "\n")
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serve: listening" {
				addrs <- line.Addr
			}
		}
		done <- cmd.Wait()
	}()
	var addr string
	select {
	case addr = <-addrs:
	case <-time.After(3 * time.Minute): // includes building the binary on a busy machine
		t.Fatal("make run printed no listening line within 3 minutes")
	}
	require.Regexp(t, `^127\.0\.0\.1:[1-9][0-9]*$`, addr, "the port actually bound, not 0")
	resp, err := http.Get("http://" + addr + "/healthz")
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// fakeGo is a stand-in for the go command: it notes skips in IDEMGUARD_TEST_SKIP_LOG as the test
// helpers do, from two "packages", and exits with $FAKE_EXIT.
const fakeGo = `#!/bin/sh
printf 'TestA\nTestB\n' >> "$IDEMGUARD_TEST_SKIP_LOG"
printf 'TestC/sub\n' >> "$IDEMGUARD_TEST_SKIP_LOG"
echo "ok  	example/pkg	0.1s"
exit "${FAKE_EXIT:-0}"
`

// make test closes with one line counting the tests skipped for want of MySQL across every
// package, and keeps go test's exit status.
func TestMakeTestCountsMySQLSkips(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	goBin := filepath.Join(dir, "go")
	require.NoError(t, os.WriteFile(goBin, []byte(fakeGo), 0o755))

	out, err := makeCmd(t, "test", "GO="+goBin).CombinedOutput()
	require.NoError(t, err, string(out))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(last, "make test: 3 tests skipped for want of MySQL; set IDEMGUARD_TEST_MYSQL_DSN="), last)
	require.Contains(t, last, "127.0.0.1:3306")
	require.Equal(t, 1, strings.Count(string(out), "skipped for want of MySQL"))

	cmd := makeCmd(t, "test", "GO="+goBin)
	cmd.Env = append(cmd.Env, "FAKE_EXIT=1")
	out, err = cmd.CombinedOutput()
	require.Error(t, err, "a failing go test fails make test")
	require.Contains(t, string(out), "3 tests skipped")

	noSkips := filepath.Join(dir, "go-clean")
	require.NoError(t, os.WriteFile(noSkips, []byte("#!/bin/sh\necho ok\n"), 0o755))
	out, err = makeCmd(t, "test", "GO="+noSkips).CombinedOutput()
	require.NoError(t, err, string(out))
	require.NotContains(t, string(out), "skipped")
}
