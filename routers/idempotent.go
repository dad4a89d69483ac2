package routers

import (
	"bufio"
	"cmp"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard/routers/middleware"
)

// Idempotent is middleware.Idempotent for gin: it runs the rest of the
// handler chain at most once per (tenant, scope, key), with the scope from
// the route (gin's FullPath) unless o.Scope names it. It panics if o is
// invalid (see middleware.Options.Validate).
func Idempotent(o middleware.Options) gin.HandlerFunc {
	m := middleware.New(o)
	return func(c *gin.Context) {
		orig, origReq := c.Writer, c.Request
		m.Serve(orig, c.Request, c.FullPath(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.Writer, c.Request = &ginWriter{ResponseWriter: w, orig: orig}, r
			defer func() { c.Writer, c.Request = orig, origReq }()
			c.Next()
		}))
		c.Abort()
	}
}

// ginWriter is the middleware's writer for the guarded handler as gin's
// ResponseWriter.
type ginWriter struct {
	http.ResponseWriter
	orig   gin.ResponseWriter
	status int
	size   int
}

func (w *ginWriter) WriteHeader(code int) {
	if w.size == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *ginWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.size += n
	return n, err
}

func (w *ginWriter) WriteString(s string) (int, error) { return w.Write([]byte(s)) }
func (w *ginWriter) Status() int                       { return cmp.Or(w.status, http.StatusOK) }
func (w *ginWriter) Size() int                         { return w.size }
func (w *ginWriter) Written() bool                     { return w.size > 0 }
func (w *ginWriter) WriteHeaderNow()                   {}
func (w *ginWriter) Pusher() http.Pusher               { return nil }

// Flush and Hijack are the middleware writer's: it refuses to stream unless
// the request accepts events.
func (w *ginWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (w *ginWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// CloseNotify is the client's connection's, though the handler is detached
// from it.
func (w *ginWriter) CloseNotify() <-chan bool { return w.orig.CloseNotify() }

var _ gin.ResponseWriter = (*ginWriter)(nil)
