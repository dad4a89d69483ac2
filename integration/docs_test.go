package integration

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// staleReference is one kind of text a reader of the repository cannot follow.
type staleReference struct {
	what string
	re   *regexp.Regexp
	// docsOnly: not checked in Go comments, where the word has its code sense (a branch of a
	// switch).
	docsOnly bool
}

// staleReferences are what a reader of the repository cannot follow: the team's issue numbers,
// its branch names, files outside the repository (the shared design notes), and names the code
// no longer has.
var staleReferences = []staleReference{
	{what: "an issue number", re: regexp.MustCompile(`(?i)\bissues?[ -]#?\d+`)},
	{what: "an issue reference", re: regexp.MustCompile(`(?:^|[\s(\[,;])#\d+(?:$|[^\w-])`)},
	{what: "an acceptance item of an issue", re: regexp.MustCompile(`(?i)\bacceptance (?:item )?\d`)},
	{what: "a branch", re: regexp.MustCompile(`(?i)\bbranch(?:es)?\b`), docsOnly: true},
	{what: "a branch name", re: regexp.MustCompile(`\bi\d+[a-z]?\b`)},
	{what: "the main branch", re: regexp.MustCompile(`(?i)\b(?:on|from|of|to) (?:main|master)\b`)},
	{what: "a file outside the repository", re: regexp.MustCompile(`\.\./shared|/work/|\b(?:DESIGN|STYLE)\.md\b|\bDESIGN §`)},
	{what: "a name the code no longer has", re: regexp.MustCompile(
		`\bengine\.(?:Guard|Store|Record)\b|\bidemguard\.(?:Store|Record|MemoryStore|NewMemoryStore|TestConfig|KeyStatus|RowStatus|AuditEvent)\b`)},
	{what: "a wrong statement about the migrations", re: regexp.MustCompile(`(?i)numbered sequentially`)},
}

// staleIn returns one line per stale reference in text, whose first line is line first of file.
func staleIn(file string, first int, text string, inCode bool) []string {
	var found []string
	for n, line := range strings.Split(text, "\n") {
		for _, r := range staleReferences {
			if r.docsOnly && inCode {
				continue
			}
			if m := r.re.FindString(line); m != "" {
				found = append(found, fmt.Sprintf("%s:%d cites %s (%q): %s", file, first+n, r.what, m, line))
			}
		}
	}
	return found
}

// TestDocsCiteNothingOutsideTheRepository keeps every Markdown file (README.md, CHANGELOG.md,
// docs/, web/README.md) and the YAML of docs/ free of references a reader cannot follow.
func TestDocsCiteNothingOutsideTheRepository(t *testing.T) {
	t.Parallel()
	yaml, err := filepath.Glob("../docs/*.yaml")
	require.NoError(t, err)
	files := append(markdownFiles(t), yaml...)
	require.GreaterOrEqual(t, len(files), 20, "the docs were not found: %v", files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, e := range staleIn(strings.TrimPrefix(f, "../"), 1, string(b), false) {
			t.Error(e)
		}
	}
}

// repoFiles returns the files of the repository whose name keep accepts, as paths from the
// integration directory, leaving out testdata, node_modules, hidden directories and the build
// outputs at the root (bin/ of make build, dist/ of goreleaser; both ignored by git, and
// release-snapshot writes its release notes there).
func repoFiles(t *testing.T, keep func(name string) bool) []string {
	t.Helper()
	var files []string
	require.NoError(t, filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		buildOutput := p == filepath.Join("..", "bin") || p == filepath.Join("..", "dist")
		if d.IsDir() && p != ".." && (buildOutput || name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && keep(name) {
			files = append(files, p)
		}
		return nil
	}))
	return files
}

// goSources returns every non-test .go file of the repository.
func goSources(t *testing.T) []string {
	t.Helper()
	return repoFiles(t, func(name string) bool {
		return strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go")
	})
}

// markdownFiles returns every Markdown file of the repository.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	return repoFiles(t, func(name string) bool { return strings.HasSuffix(name, ".md") })
}

// TestDocsInGoCommentsCiteNothingOutsideTheRepository holds the comments of every non-test Go file,
// doc comments first among them (what go doc and pkg.go.dev show), to the rules of the docs.
func TestDocsInGoCommentsCiteNothingOutsideTheRepository(t *testing.T) {
	t.Parallel()
	files := goSources(t)
	require.GreaterOrEqual(t, len(files), 50, "the Go sources were not found")
	for _, f := range files {
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, f, nil, parser.ParseComments|parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, group := range file.Comments {
			for _, c := range group.List {
				for _, e := range staleIn(strings.TrimPrefix(f, "../"), fset.Position(c.Pos()).Line, c.Text, true) {
					t.Error(e)
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
		"Store wraps an engine.Store and injects faults",
		"runs one `engine.Guard` per node",
		"Config{Store: idemguard.NewMemoryStore()}",
		"numbered sequentially (goose versioning)",
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
		"Store wraps a store.Store and injects faults",
		"runs one `idemguard.Guard` per node",
		"store.AuditEvent and idemguard.Guard",
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
	sources, err := filepath.Glob("../internal/metrics/*.go")
	require.NoError(t, err)
	registered := map[string]bool{}
	for _, f := range sources {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range regexp.MustCompile(`(?:counter|gauge)\("([a-z_]+)"|Name: +"([a-z_]+)"`).FindAllStringSubmatch(string(src), -1) {
			registered["idemguard_"+m[1]+m[2]] = true
		}
	}
	require.Contains(t, registered, "idemguard_claims_total", "the metric names were not found in internal/metrics")

	// Names that are not metrics: database users, test and bench database prefixes, a file name,
	// the MCP door's job tools, the bench's profiling build tag.
	notMetric := regexp.MustCompile(`^idemguard_(?:app|ops|t_|bench_.*|job_status|job_cancel|pprof)$`)
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

// markdownLink is an inline link or image of Markdown: [text](target) or [text](target "title").
var markdownLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// headingAnchors returns the anchors GitHub gives the headings of a Markdown document: the
// heading's text in lower case, without punctuation, spaces turned into hyphens, a repeated
// one suffixed -1, -2, ….
func headingAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// relativeLinks returns the relative link targets of a Markdown document, outside code.
func relativeLinks(doc string) []string {
	var links []string
	inFence := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence {
			continue
		}
		line = regexp.MustCompile("`[^`]*`").ReplaceAllString(line, "")
		for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links = append(links, target)
		}
	}
	return links
}

// TestDocsRelativeLinksResolve: every relative link of every Markdown file names a file or
// directory of the repository, and an anchor on a Markdown file names one of its headings.
func TestDocsRelativeLinksResolve(t *testing.T) {
	t.Parallel()
	files := markdownFiles(t)
	require.GreaterOrEqual(t, len(files), 10, "the Markdown files were not found")
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, link := range relativeLinks(string(b)) {
			checked++
			target, anchor, _ := strings.Cut(link, "#")
			resolved := f
			if target != "" {
				resolved = filepath.Join(filepath.Dir(f), filepath.FromSlash(target))
			}
			doc, err := os.ReadFile(resolved)
			if err != nil {
				if st, serr := os.Stat(resolved); serr == nil && st.IsDir() && anchor == "" {
					continue
				}
				t.Errorf("%s links to %s, which does not exist", strings.TrimPrefix(f, "../"), link)
				continue
			}
			if anchor != "" && strings.HasSuffix(resolved, ".md") && !headingAnchors(string(doc))[anchor] {
				t.Errorf("%s links to %s: %s has no heading #%s", strings.TrimPrefix(f, "../"), link, target, anchor)
			}
		}
	}
	require.NotZero(t, checked, "no relative links found")
}

// TestDocsLinkCheckerCatchesBrokenLinks proves the helpers of TestDocsRelativeLinksResolve see links
// and anchors as GitHub does.
func TestDocsLinkCheckerCatchesBrokenLinks(t *testing.T) {
	t.Parallel()
	doc := "# Operations\n## 5. Audit trail\n## Runs\n## Runs\n```sh\n[no](in-code.md)\n```\n" +
		"See [ops](OPERATIONS.md#5-audit-trail), `[no](code.md)`, [web](https://example.com/x.md) and ![img](a.png \"t\").\n"
	require.Equal(t, []string{"OPERATIONS.md#5-audit-trail", "a.png"}, relativeLinks(doc))
	anchors := headingAnchors(doc)
	for _, a := range []string{"operations", "5-audit-trail", "runs", "runs-1"} {
		require.True(t, anchors[a], "anchor %s", a)
	}
	require.False(t, anchors["5.-audit-trail"])
}

// TestDocsIndexLinksEveryDoc: docs/README.md links every file of docs/, and the README.md of
// each directory under docs/ links every file beside it, so no page is reachable only by
// knowing its name.
func TestDocsIndexLinksEveryDoc(t *testing.T) {
	t.Parallel()
	require.NoError(t, filepath.WalkDir("../docs", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		index, err := os.ReadFile(filepath.Join(p, "README.md"))
		require.NoError(t, err, "%s has no README.md indexing it", p)
		var linked []string
		for _, link := range relativeLinks(string(index)) {
			target, _, _ := strings.Cut(link, "#")
			linked = append(linked, path.Clean(target))
		}
		entries, err := os.ReadDir(p)
		require.NoError(t, err)
		for _, e := range entries {
			want := e.Name()
			if e.IsDir() {
				want = path.Join(e.Name(), "README.md")
			} else if want == "README.md" {
				continue
			}
			if !slices.Contains(linked, want) {
				t.Errorf("%s/README.md does not link %s", strings.TrimPrefix(p, "../"), want)
			}
		}
		return nil
	}))
}
