package deploy

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func goreleaser(t *testing.T) string {
	t.Helper()
	return needTool(t, "goreleaser", "the release tests run goreleaser check and make release-snapshot")
}

func TestGoreleaserCheck(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(goreleaser(t), "check")
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "goreleaser check:\n%s", out)
}

// make release-snapshot builds the whole release without publishing: an archive per platform
// with checksums, and the linux images; the binaries print the stamped version.
func TestReleaseSnapshot(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the release")
	}
	gr := goreleaser(t)
	pm := podman(t)
	needTool(t, "make", "the release is built by make release-snapshot")

	cmd := exec.Command("make", "--no-print-directory", "-C", repoRoot, "release-snapshot", "GORELEASER="+gr, "CONTAINER_TOOL="+pm)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "make release-snapshot:\n%s", out)

	dist := filepath.Join(repoRoot, "dist")
	var meta struct {
		Version string `json:"version"`
		Commit  string `json:"commit"`
	}
	b, err := os.ReadFile(filepath.Join(dist, "metadata.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &meta))
	require.Contains(t, meta.Version, "snapshot")
	require.Len(t, meta.Commit, 40)

	// The release notes are the newest CHANGELOG.md entry.
	notes, err := os.ReadFile(filepath.Join(repoRoot, "bin", "release-notes.md"))
	require.NoError(t, err)
	changelog, err := os.ReadFile(filepath.Join(repoRoot, "CHANGELOG.md"))
	require.NoError(t, err)
	_, newest, ok := strings.Cut(string(changelog), "\n## ")
	require.True(t, ok, "CHANGELOG.md has no ## entry")
	_, newest, _ = strings.Cut(newest, "\n")
	newest, _, _ = strings.Cut(newest, "\n## ")
	require.Equal(t, strings.TrimSpace(newest), strings.TrimSpace(string(notes)))
	require.NotEmpty(t, strings.TrimSpace(string(notes)))

	// One archive per platform, each in checksums.txt with its SHA-256.
	sums := map[string]string{}
	f, err := os.Open(filepath.Join(dist, "checksums.txt"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		require.True(t, ok, sc.Text())
		sums[name] = sum
	}
	require.NoError(t, sc.Err())
	var want []string
	for _, osys := range []string{"darwin", "linux"} {
		for _, arch := range []string{"amd64", "arm64"} {
			want = append(want, "idemguard_"+meta.Version+"_"+osys+"_"+arch+".tar.gz")
		}
	}
	var names []string
	for n := range sums {
		names = append(names, n)
	}
	sort.Strings(names)
	require.Equal(t, want, names, "checksums.txt lists the four archives")
	for _, name := range want {
		b, err := os.ReadFile(filepath.Join(dist, name))
		require.NoError(t, err)
		h := sha256.Sum256(b)
		require.Equal(t, hex.EncodeToString(h[:]), sums[name], name)
	}

	// The binary of this platform, from its archive, prints the stamped version.
	if runtime.GOOS == "linux" || runtime.GOOS == "darwin" {
		bin := extract(t, filepath.Join(dist, "idemguard_"+meta.Version+"_"+runtime.GOOS+"_"+runtime.GOARCH+".tar.gz"), "idemguard")
		out, err := exec.Command(bin, "version").Output()
		require.NoError(t, err)
		require.Regexp(t, `^idemguard `+regexp.QuoteMeta(meta.Version)+`\ncommit: `+meta.Commit+`\ndate: \d{4}-\d\d-\d\dT`, string(out))
		require.NotEmpty(t, pgoOf(t, bin), "the released binary is the profile-guided build")
	}

	// The images, one per linux architecture, stamped the same.
	for _, arch := range []string{"amd64", "arm64"} {
		image := "ghcr.io/idemguard/idemguard:" + meta.Version + "-" + arch
		t.Cleanup(func() { _ = exec.Command(pm, "rmi", "-f", image).Run() })
		var inspect []struct {
			Architecture string
			Size         int64
			Config       struct{ Labels map[string]string }
		}
		require.NoError(t, json.Unmarshal([]byte(run(t, pm, "image", "inspect", image)), &inspect))
		require.Len(t, inspect, 1)
		require.Equal(t, arch, inspect[0].Architecture)
		require.LessOrEqual(t, inspect[0].Size, int64(maxImageBytes))
		require.Equal(t, meta.Version, inspect[0].Config.Labels["org.opencontainers.image.version"])
		require.Equal(t, meta.Commit, inspect[0].Config.Labels["org.opencontainers.image.revision"])
		if arch == runtime.GOARCH {
			out := run(t, pm, append(append([]string{}, podmanRun...), "--rm", image, "version")...)
			require.Regexp(t, `^idemguard `+regexp.QuoteMeta(meta.Version)+`\ncommit: `+meta.Commit+`\n`, out)
		}
	}
}

// extract writes the file named name of the .tar.gz archive into a temporary folder.
func extract(t *testing.T, archive, name string) string {
	t.Helper()
	f, err := os.Open(archive)
	require.NoError(t, err)
	defer f.Close()
	gz, err := gzip.NewReader(f)
	require.NoError(t, err)
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		require.NoError(t, err, "%s has no %s", archive, name)
		if h.Name != name {
			continue
		}
		dst := filepath.Join(t.TempDir(), name)
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
		require.NoError(t, err)
		_, err = io.Copy(out, tr)
		require.NoError(t, err)
		require.NoError(t, out.Close())
		return dst
	}
}
