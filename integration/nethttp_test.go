package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// nethttpProgram is a net/http service that guards a route with
// routers/middleware and nothing else of the HTTP side.
const nethttpProgram = `package main

import (
	"net/http"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/middleware"
	"github.com/idemguard/idemguard/store/memstore"
	"github.com/idemguard/idemguard/tenancy"
)

func main() {
	guard, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: []byte("a secret of at least thirty-two bytes")})
	if err != nil {
		panic(err)
	}
	idempotent := middleware.Idempotent(middleware.Options{Guard: guard,
		Tenant: func(*http.Request) (tenancy.ID, error) { return "acme", nil }})
	mux := http.NewServeMux()
	mux.Handle("POST /orders", idempotent(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(` + "`" + `{"ok":true}` + "`" + `))
	})))
	_ = http.ListenAndServe("127.0.0.1:0", mux)
}
`

// TestNetHTTPMiddlewareLinksNoGin: a net/http program of another module that
// uses the middleware builds, and links no gin: routers/middleware and the
// pipeline under it import net/http only. An import of gin anywhere below
// routers/middleware fails it.
func TestNetHTTPMiddlewareLinksNoGin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	checkout, err := filepath.Abs("..")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(nethttpProgram), 0o600))
	writeOutsideGoMod(t, dir, checkout)
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOSUMDB=off")

	vet := exec.Command("go", "vet", ".")
	vet.Dir, vet.Env = dir, env
	out, err := vet.CombinedOutput()
	require.NoError(t, err, "the net/http program does not build:\n%s", out)

	list := exec.Command("go", "list", "-deps", ".")
	list.Dir, list.Env = dir, env
	out, err = list.CombinedOutput()
	require.NoError(t, err, "go list -deps:\n%s", out)
	deps := string(out)
	require.Contains(t, deps, "github.com/idemguard/idemguard/routers/middleware")
	for _, dep := range strings.Split(deps, "\n") {
		require.False(t, strings.HasPrefix(dep, "github.com/gin-gonic/") || strings.HasPrefix(dep, "github.com/gin-contrib/"),
			"a net/http program of the middleware links %s", dep)
	}
}
