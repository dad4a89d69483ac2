package integration

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// staleReferences are what a reader of the repository cannot follow: the team's issue numbers,
// its branch names, and files outside the repository (the shared design notes).
var staleReferences = []struct {
	what string
	re   *regexp.Regexp
}{
	{"an issue number", regexp.MustCompile(`(?i)\bissues?[ -]#?\d+`)},
	{"an issue reference", regexp.MustCompile(`(?:^|[\s(\[,;])#\d+(?:$|[^\w-])`)},
	{"an acceptance item of an issue", regexp.MustCompile(`(?i)\bacceptance (?:item )?\d`)},
	{"a branch", regexp.MustCompile(`(?i)\bbranch(?:es)?\b`)},
	{"a branch name", regexp.MustCompile(`\bi\d+[a-z]?\b`)},
	{"the main branch", regexp.MustCompile(`(?i)\b(?:on|from|of|to) (?:main|master)\b`)},
	{"a file outside the repository", regexp.MustCompile(`\.\./shared|/work/|\b(?:DESIGN|STYLE)\.md\b|\bDESIGN §`)},
}

// TestDocsCiteNothingOutsideTheRepository keeps README.md, docs/ and web/README.md free of
// references a reader cannot follow.
func TestDocsCiteNothingOutsideTheRepository(t *testing.T) {
	t.Parallel()
	files := []string{"../README.md", "../web/README.md"}
	for _, glob := range []string{"../docs/*.md", "../docs/*.yaml"} {
		m, err := filepath.Glob(glob)
		require.NoError(t, err)
		files = append(files, m...)
	}
	require.GreaterOrEqual(t, len(files), 8, "the docs were not found: %v", files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for n, line := range strings.Split(string(b), "\n") {
			for _, r := range staleReferences {
				if m := r.re.FindString(line); m != "" {
					t.Errorf("%s:%d cites %s (%q): %s", strings.TrimPrefix(f, "../"), n+1, r.what, m, line)
				}
			}
		}
	}
}

// TestStaleReferencePatterns proves each pattern catches what it is for, and lets through what
// the docs legitimately say.
func TestStaleReferencePatterns(t *testing.T) {
	t.Parallel()
	caught := []string{
		"Target (issue 2): at concurrency 16",
		"Results on merged main (issues 8 and 10)",
		"the issue-8 lease machinery",
		"fixed in #17.",
		"**Acceptance item 1 is still not shown**",
		"seeding the rows of acceptance 1",
		"decide by its nonce (branch i8 makes this explicit)",
		"`a50bd0a` (i12, clean checkout)",
		"a binary built from main before the merge",
		"The contract is [`DESIGN.md`](../shared/DESIGN.md)",
		"the claim protocol (DESIGN §4) needs",
	}
	for _, line := range caught {
		found := false
		for _, r := range staleReferences {
			found = found || r.re.MatchString(line)
		}
		require.True(t, found, "not caught: %s", line)
	}
	passed := []string{
		"issuer: https://login.example.com/",
		"see [Running it](#running-it) and [the run](#2026-11-23-0803-the-merged-tree-quiet-machine)",
		"exactly as in §2",
		"the main path of a request",
		"HTTP 409 is in progress",
	}
	for _, line := range passed {
		for _, r := range staleReferences {
			require.False(t, r.re.MatchString(line), "%s matched as %s", line, r.what)
		}
	}
}

// TestDocumentedMetricsExist checks that every metric name README.md and docs/ mention is one
// that internal/metrics registers (serve's /metrics, or cleanup's textfile), so a renamed metric
// cannot leave a dashboard recipe behind.
func TestDocumentedMetricsExist(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../internal/metrics/metrics.go")
	require.NoError(t, err)
	registered := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?:counter|gauge)\("([a-z_]+)"|Name: +"([a-z_]+)"`).FindAllStringSubmatch(string(src), -1) {
		registered["idemguard_"+m[1]+m[2]] = true
	}
	require.Contains(t, registered, "idemguard_claims_total", "the metric names were not found in internal/metrics")

	// Names that are not metrics: database users, test and bench database prefixes, a file name.
	notMetric := regexp.MustCompile(`^idemguard_(?:app|ops|t_|bench_.*)$`)
	mentioned := regexp.MustCompile(`\bidemguard_[a-z_]+(?:\.prom)?`)
	files, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	// The Kubernetes manifests too; their alert rules are docs/alerts.yaml, which
	// cmd/idemguard's metric name tests cover.
	files = append(files, "../README.md", "../deploy/helm/idemguard/values.yaml",
		"../deploy/manifests/idemguard.yaml", "../deploy/manifests/migrate-job.yaml")
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, name := range mentioned.FindAllString(string(b), -1) {
			if notMetric.MatchString(name) || strings.HasSuffix(name, ".prom") {
				continue
			}
			checked++
			require.True(t, registered[name], "%s mentions %s, which internal/metrics does not register", strings.TrimPrefix(f, "../"), name)
		}
	}
	require.NotZero(t, checked, "no metric names found in the docs")
}
