// Package webui serves the demo page that `idemguard serve` shows at / in
// development mode: its HTML as web/demo/index.html stands (package web), its
// script from dist/, which is built from web/ (`npm run build:demo`) and
// committed, so building the binary needs no npm; a test fails when it is
// stale.
package webui

import (
	"embed"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/idemguard/idemguard/web"
)

//go:embed dist
var dist embed.FS

// Files are the page's built files: assets/.
func Files() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embedded tree always has dist
	}
	return sub
}

// contentSecurityPolicy lets the page load only its own script and call only
// its own origin.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; " +
	"connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// SetPageHeaders sets what every page the service serves is sent with:
// its Content-Security-Policy, no content sniffing, no referrer, and
// revalidation on every load (a new binary serves a new page).
func SetPageHeaders(h http.Header, csp string) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

// Handler serves GET / (index.html) and GET /assets/*; anything else is 404.
func Handler() http.Handler {
	files := http.FileServerFS(Files())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		SetPageHeaders(h, contentSecurityPolicy)
		p := path.Clean("/" + r.URL.Path)
		switch {
		case p == "/":
			h.Set("Content-Type", "text/html; charset=utf-8")
			if r.Method != http.MethodHead {
				_, _ = io.WriteString(w, web.DemoPage())
			}
		case strings.HasPrefix(p, "/assets/"):
			r2 := r.Clone(r.Context())
			r2.URL.Path = p
			files.ServeHTTP(w, r2)
		default:
			http.NotFound(w, r)
		}
	})
}
