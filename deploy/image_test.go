package deploy

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/quickstart"
	"github.com/idemguard/idemguard/internal/testdb"
)

// maxImageBytes is the most the image may weigh.
const maxImageBytes = 30 << 20

// podmanRun are the options every container of these tests runs with: runc (crun refuses some
// machines' cgroup layouts), limits no higher than the machine's (raising one may be refused),
// the image's own user, a read-only root filesystem, no capabilities. The image's HEALTHCHECK
// needs systemd timers under podman; the test runs `idemguard health` itself instead.
var podmanRun = []string{"run", "--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096",
	"--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--no-healthcheck"}

// podman returns the podman binary, with runc beside it.
func podman(t *testing.T) string {
	t.Helper()
	p := needTool(t, "podman", "the image tests build and run the image with podman")
	needTool(t, "runc", "podman runs the image's containers with --runtime runc")
	return p
}

func randomTag(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// run runs a command and returns its stdout, failing the test (with stderr) if it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "%s %s:\n%s%s", name, strings.Join(args, " "), stdout.String(), stderr.String())
	return stdout.String()
}

// TestImage builds the image with make image and runs it as a user would: serve in development
// mode answers the quick start through a published port, as a non-root user with a read-only
// root filesystem; migrate up and cleanup --dry-run work against MySQL; it weighs at most 30 MB.
func TestImage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs the image")
	}
	pm := podman(t)
	needTool(t, "make", "the image is built by make image")
	for _, tool := range []string{"bash", "curl"} {
		needTool(t, tool, "the quick start needs it")
	}
	db := testdb.NewEmpty(t) // before the build: a test without MySQL stops here

	image := "localhost/idemguard:deploy-test-" + randomTag(t)
	build := exec.Command("make", "--no-print-directory", "-C", repoRoot, "image", "IMAGE="+image, "CONTAINER_TOOL="+pm)
	out, err := build.CombinedOutput()
	require.NoError(t, err, "make image:\n%s", out)
	t.Cleanup(func() { _ = exec.Command(pm, "rmi", "-f", image).Run() })

	// Small, static, non-root, labelled.
	var inspect []struct {
		Size   int64
		Config struct {
			User       string
			Entrypoint []string
			Cmd        []string
			Labels     map[string]string
		}
		Healthcheck *struct{ Test []string }
	}
	require.NoError(t, json.Unmarshal([]byte(run(t, pm, "image", "inspect", image)), &inspect))
	require.Len(t, inspect, 1)
	img := inspect[0]
	t.Logf("image %s: %d bytes (%.1f MB)", image, img.Size, float64(img.Size)/1e6)
	require.LessOrEqual(t, img.Size, int64(maxImageBytes), "the image weighs more than 30 MB")
	require.Equal(t, "65532:65532", img.Config.User)
	require.Equal(t, []string{"idemguard"}, img.Config.Entrypoint)
	require.Equal(t, []string{"serve"}, img.Config.Cmd)
	for _, l := range []string{"source", "version", "licenses", "revision"} {
		require.NotEmpty(t, img.Config.Labels["org.opencontainers.image."+l], "OCI label %s", l)
	}
	require.Equal(t, "Apache-2.0", img.Config.Labels["org.opencontainers.image.licenses"])
	require.NotNil(t, img.Healthcheck, "the image's HEALTHCHECK (Docker format)")
	require.Equal(t, []string{"CMD", "idemguard", "health"}, img.Healthcheck.Test)

	// No shell in it.
	sh := exec.Command(pm, append(append([]string{}, podmanRun...), "--rm", "--entrypoint", "/bin/sh", image, "-c", "true")...)
	out, err = sh.CombinedOutput()
	require.Error(t, err, "the image has a shell: %s", out)

	t.Run("serve", func(t *testing.T) { testImageServe(t, pm, image) })
	t.Run("migrate and cleanup", func(t *testing.T) { testImageMigrateCleanup(t, pm, image, db) })
}

func testImageServe(t *testing.T, pm, image string) {
	name := "idemguard-deploy-test-" + randomTag(t)
	// The image's default command (serve), in development mode, its port published on loopback.
	run(t, pm, append(append([]string{}, podmanRun...), "-d", "--name", name, "-p", "127.0.0.1::8080",
		"-e", "IDEMGUARD_MODE=development", image)...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command(pm, "logs", name).CombinedOutput()
			t.Logf("container logs:\n%s", logs)
		}
		_ = exec.Command(pm, "rm", "-f", "-t", "2", name).Run()
	})
	addr := strings.TrimSpace(run(t, pm, "port", name, "8080/tcp"))
	require.Regexp(t, `^127\.0\.0\.1:\d+$`, addr)

	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "serve in the container did not answer /healthz on %s within 30s: %v", addr, err)
		time.Sleep(100 * time.Millisecond)
	}

	// The process runs as the image's user, on a read-only root filesystem.
	var state []struct {
		State      struct{ Pid int }
		HostConfig struct{ ReadonlyRootfs bool }
	}
	require.NoError(t, json.Unmarshal([]byte(run(t, pm, "inspect", name)), &state))
	require.Len(t, state, 1)
	require.True(t, state[0].HostConfig.ReadonlyRootfs)
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(state[0].State.Pid), "status"))
	require.NoError(t, err)
	require.Regexp(t, `(?m)^Uid:\s+65532\s+65532\s+65532\s+65532$`, string(status), "serve runs as uid 65532")
	require.Regexp(t, `(?m)^Gid:\s+65532\s+65532\s+65532\s+65532$`, string(status))

	// The image's health check, run inside it.
	require.Equal(t, "ok: http://127.0.0.1:8080/healthz\n", run(t, pm, "exec", name, "idemguard", "health"))

	// The README's quick start, as written, through the published port.
	script := strings.ReplaceAll(quickStartBlock(t), "127.0.0.1:8080", addr)
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "quick start:\n%s", out)
	parts := strings.Split(string(out), "HTTP/1.1 ")[1:]
	require.Len(t, parts, 3, "three answers shown: %s", out)
	require.True(t, strings.HasPrefix(parts[0], "200 "), parts[0])
	require.Contains(t, parts[0], `"cached":false`)
	require.True(t, strings.HasPrefix(parts[1], "200 "), parts[1])
	require.Contains(t, parts[1], "Idempotent-Replayed: true")
	require.Contains(t, parts[1], `"cached":true`)
	require.True(t, strings.HasPrefix(parts[2], "409 "), parts[2])
	require.Contains(t, parts[2], `"stopReason":"in_progress"`)

	// SIGTERM (podman stop) ends serve cleanly, well within the chart's grace period.
	start := time.Now()
	run(t, pm, "stop", "-t", "20", name)
	require.Less(t, time.Since(start), 15*time.Second)
	code := strings.TrimSpace(run(t, pm, "inspect", "--format", "{{.State.ExitCode}}", name))
	require.Equal(t, "0", code, "serve's exit status after SIGTERM")
}

func testImageMigrateCleanup(t *testing.T, pm, image string, db *testdb.Database) {
	// The database is on this machine's loopback: the container shares the host's network.
	dbRun := func(args ...string) string {
		return run(t, pm, append(append(append([]string{}, podmanRun...), "--rm", "--network", "host",
			"-e", "IDEMGUARD_MYSQL_DSN="+db.DSN, image), args...)...)
	}
	dbRun("migrate", "up")
	var version int64
	require.NoError(t, db.DB.Get(&version, "SELECT MAX(version_id) FROM goose_db_version WHERE is_applied"))
	require.Equal(t, highestMigration(t), version, "migrate up from the image applied every migration")

	var summary struct {
		DryRun  bool   `json:"dry_run"`
		Stopped string `json:"stopped"`
		Deleted *int64 `json:"deleted"`
	}
	out := dbRun("cleanup", "--dry-run")
	require.NoError(t, json.Unmarshal([]byte(out), &summary), out)
	require.True(t, summary.DryRun)
	require.Equal(t, "done", summary.Stopped)
	require.NotNil(t, summary.Deleted)
}

// highestMigration is the highest version among migrations/*.sql.
func highestMigration(t *testing.T) int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "migrations", "*.sql"))
	require.NoError(t, err)
	var highest int64
	for _, f := range files {
		n, err := strconv.ParseInt(strings.SplitN(filepath.Base(f), "_", 2)[0], 10, 64)
		require.NoError(t, err, f)
		highest = max(highest, n)
	}
	require.NotZero(t, highest)
	return highest
}

// quickStartBlock returns the shell block between the quickstart markers of README.md.
func quickStartBlock(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	block, err := quickstart.Block(string(doc))
	require.NoError(t, err)
	return block
}
