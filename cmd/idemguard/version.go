package main

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"runtime"
	"runtime/debug"

	"github.com/pressly/goose/v3"

	"github.com/idemguard/idemguard/migrations"
)

// version, commit and date are set at link time by release builds (make build, make image and
// goreleaser do):
//
//	go build -ldflags "-X main.version=v1.2.0 -X main.commit=$(git rev-parse HEAD) -X main.date=2026-11-27T18:00:00Z" ./cmd/idemguard
//
// Without them the module version (go install ...@v1.2.0) and the VCS stamp of the build
// (runtime/debug.ReadBuildInfo: vcs.revision, vcs.time) are used.
var (
	version = ""
	commit  = ""
	date    = ""
)

// buildInfo is what `idemguard version` prints.
type buildInfo struct {
	Version   string // release version, the module version, or "devel"
	Commit    string // VCS revision, "unknown" when the build has none
	Date      string // the commit's (or the build's) time, "unknown" when the build has none
	Modified  bool   // the working tree had uncommitted changes
	GoVersion string
	// Schema is the highest migration version embedded in the binary: the schema it expects
	// (`idemguard migrate status` shows what the database has).
	Schema int64
}

func readBuildInfo() (buildInfo, error) {
	b := buildInfo{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.time":
				if b.Date == "" {
					b.Date = s.Value
				}
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	if b.Date == "" {
		b.Date = "unknown"
	}
	schema, err := schemaVersion(migrations.FS)
	if err != nil {
		return buildInfo{}, err
	}
	b.Schema = schema
	return b, nil
}

// schemaVersion returns the highest version among the *.sql migrations in fsys.
func schemaVersion(fsys fs.FS) (int64, error) {
	files, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return 0, err
	}
	var highest int64
	for _, f := range files {
		v, err := goose.NumericComponent(path.Base(f))
		if err != nil {
			return 0, fmt.Errorf("migration %s: %w", f, err)
		}
		highest = max(highest, v)
	}
	if highest == 0 {
		return 0, fmt.Errorf("no migration embedded")
	}
	return highest, nil
}

// runVersion implements `idemguard version` (also `idemguard --version`).
func runVersion(_ context.Context, e env, args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(e.stderr, "idemguard version: unexpected argument %q; version takes none\n", args[0])
		return exitUsage
	}
	b, err := readBuildInfo()
	if err != nil {
		fmt.Fprintf(e.stderr, "idemguard version: %v\n", err)
		return exitError
	}
	modified := ""
	if b.Modified {
		modified = " (modified)"
	}
	fmt.Fprintf(e.stdout, "idemguard %s\ncommit: %s%s\ndate: %s\ngo: %s\nschema: %d (the highest migration this binary applies; `idemguard migrate status` shows the database's)\n",
		b.Version, b.Commit, modified, b.Date, b.GoVersion, b.Schema)
	return exitOK
}
