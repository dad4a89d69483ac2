package benchpprof

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
)

// gzipMagic starts every CPU profile runtime/pprof writes (gzipped protobuf).
var gzipMagic = []byte{0x1f, 0x8b}

func TestProfileCPUWritesAProfileWhenAsked(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvDir, dir)
	t.Setenv(EnvCPU, "1")
	stop := ProfileCPU("p.cpu.pprof")
	stop()
	b, err := os.ReadFile(filepath.Join(dir, "p.cpu.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, gzipMagic) {
		t.Fatalf("the profile does not start as a gzipped protobuf: % x", b[:min(len(b), 8)])
	}
}

func TestProfileCPURecordsNothingUnlessAsked(t *testing.T) {
	for _, cpu := range []string{"", "0"} {
		dir := t.TempDir()
		t.Setenv(EnvDir, dir)
		t.Setenv(EnvCPU, cpu)
		ProfileCPU("p.cpu.pprof")()
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("%s=%q: %d files written, want none", EnvCPU, cpu, len(entries))
		}
	}
}

// A profile that cannot start (one runs already) leaves no file behind for
// the bench's merge to fail on.
func TestProfileCPULeavesNoFileWhenItCannotStart(t *testing.T) {
	if err := pprof.StartCPUProfile(io.Discard); err != nil {
		t.Fatal(err)
	}
	defer pprof.StopCPUProfile()
	dir := t.TempDir()
	t.Setenv(EnvDir, dir)
	t.Setenv(EnvCPU, "1")
	ProfileCPU("p.cpu.pprof")()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("%d files left, want none", len(entries))
	}
}
