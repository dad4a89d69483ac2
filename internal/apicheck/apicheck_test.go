package apicheck

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite docs/api.txt from the source")

const modulePath = "github.com/idemguard/idemguard"

// The committed API file must list exactly what the public packages declare:
// an exported identifier added, removed or changed without docs/api.txt
// changing with it fails here. `go test ./internal/apicheck -update` rewrites
// the file; review its diff as the API change it is.
func TestAPIUnchanged(t *testing.T) {
	root := filepath.Join("..", "..")
	got, err := List(root, modulePath)
	require.NoError(t, err)
	file := filepath.Join(root, "docs", "api.txt")
	text := strings.Join(got, "\n") + "\n"
	if *update {
		require.NoError(t, os.WriteFile(file, []byte(text), 0o644))
	}
	want, err := os.ReadFile(file)
	require.NoError(t, err, "docs/api.txt is missing: run go test ./internal/apicheck -update")
	if string(want) != text {
		t.Errorf("the public API differs from docs/api.txt (run go test ./internal/apicheck -update and review the diff):\n%s",
			diff(strings.Split(strings.TrimSuffix(string(want), "\n"), "\n"), got))
	}
}

// diff lists the lines only one side has (both sides are sorted).
func diff(want, got []string) string {
	var b strings.Builder
	i, j := 0, 0
	for i < len(want) || j < len(got) {
		switch {
		case j >= len(got) || (i < len(want) && want[i] < got[j]):
			b.WriteString("- " + want[i] + "\n")
			i++
		case i >= len(want) || got[j] < want[i]:
			b.WriteString("+ " + got[j] + "\n")
			j++
		default:
			i++
			j++
		}
	}
	return b.String()
}

// The lister itself: an exported addition of every kind shows as a line, and
// unexported or test-only declarations do not.
func TestListSeesEveryKindOfDeclaration(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import "context"

// T is exported.
type T struct {
	A int
	b int
	context.Context
}

type U interface{ M(x int) error }

type G[K comparable, V any] map[K]V

const C = 1
var V, w = 1, 2

func F(ctx context.Context) error { return nil }
func (t *T) M() {}
func (t *t2) N() {}
type t2 struct{}
func f() {}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\nfunc TestX() {}\n"), 0o644))
	got, err := List(dir, "example.com/p")
	require.NoError(t, err)
	require.Equal(t, []string{
		"pkg example.com/p, const C",
		"pkg example.com/p, func F(ctx context.Context) error",
		"pkg example.com/p, method (*T) M()",
		"pkg example.com/p, type G[K comparable, V any] map[K]V",
		"pkg example.com/p, type T struct",
		"pkg example.com/p, type T struct, A int",
		"pkg example.com/p, type T struct, embedded context.Context",
		"pkg example.com/p, type U interface",
		"pkg example.com/p, type U interface, M(x int) error",
		"pkg example.com/p, var V",
	}, got)
}

func TestPublic(t *testing.T) {
	for rel, want := range map[string]bool{".": true, "store/memstore": true, "internal/keys": false,
		"cmd/idemguard": false, "integration/faults": false, "sanitize/testdata": false, "routers/auth": true} {
		require.Equal(t, want, Public(rel), rel)
	}
}
