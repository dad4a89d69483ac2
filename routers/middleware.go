package routers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemguard/idemguard/internal/reqlog"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/tenancy"
)

var okBody = []byte(`{"status":"ok"}`)

// healthz serves GET /healthz: the process answers.
func (h *handlers) healthz(c *gin.Context) {
	c.Data(http.StatusOK, pipeline.ContentJSON, okBody)
}

// readyz serves GET /readyz: Options.Ready within ReadyTimeout.
func (h *handlers) readyz(c *gin.Context) {
	if h.ready != nil {
		ctx, cancel := context.WithTimeout(c.Request.Context(), ReadyTimeout)
		defer cancel()
		if err := h.ready(ctx); err != nil {
			// The cause goes to the log only: it may name hosts or settings.
			h.log.Warn("http: not ready", slog.Any("err", err))
			h.fail(c, pipeline.Reject(pipeline.ErrNotReady, "the service cannot serve requests yet (store unreachable or migrations pending)"))
			return
		}
	}
	c.Data(http.StatusOK, pipeline.ContentJSON, okBody)
}

// serveMetrics serves GET /metrics with Options.Metrics.
func (h *handlers) serveMetrics(c *gin.Context) {
	if h.metrics == nil {
		h.fail(c, pipeline.Reject(pipeline.ErrNoMetrics, "metrics are not enabled on this server"))
		return
	}
	h.metrics.ServeHTTP(c.Writer, c.Request)
}

func (h *handlers) noRoute(c *gin.Context) {
	h.fail(c, pipeline.Reject(pipeline.ErrUnknownRoute, "no such route; see docs/openapi.yaml"))
}

func (h *handlers) noMethod(c *gin.Context) {
	// gin has set the Allow header.
	h.fail(c, pipeline.Reject(pipeline.ErrMethodNotAllowed, "this route does not accept the method; see the Allow header"))
}

// probeRoutes are logged at debug level: probes and scrapes would drown the
// request log.
var probeRoutes = map[string]bool{routeHealthz: true, routeReadyz: true, routeMetrics: true}

// logFields are what a request's handlers tell its log line (and the
// principal, which later handlers read and the line leaves out). requestLog
// puts them in the gin context under one key (one entry in gin's map,
// holding a pointer: nothing boxed per field) and returns them to a pool
// once the line is written.
type logFields struct {
	tenant                           tenancy.ID
	scope, keyHash, stopReason, auth string
	principal                        string // principalFrom
	replayed                         bool
}

// logFieldsKey is the gin-context key of a request's *logFields.
const logFieldsKey = "idemguard.log"

var logFieldsPool = sync.Pool{New: func() any { return new(logFields) }}

// logOf returns c's log fields; a throwaway when requestLog does not run
// (a handler reached some other way logs nothing).
func logOf(c *gin.Context) *logFields {
	if v, ok := c.Get(logFieldsKey); ok {
		return v.(*logFields)
	}
	f := new(logFields)
	c.Set(logFieldsKey, f)
	return f
}

// requestLog writes one line per request and, when the API has
// HTTPMetrics (New), observes it there: one start and one end time serve
// both (time.Now is not free on every clock source). It logs the route
// template, never the raw path (which holds client keys), and never the
// body, the client key or the Authorization header.
func (h *handlers) requestLog(c *gin.Context) {
	start := time.Now()
	f := logFieldsPool.Get().(*logFields)
	if c.Keys == nil {
		// gin makes a map for the first Set of every request (it resets
		// Keys to nil); a pooled one, cleared after the request, serves
		// instead. A map an earlier handler made is used as it is.
		keys := keysPool.Get().(map[any]any)
		c.Keys = keys
		defer func() {
			clear(keys)
			keysPool.Put(keys)
		}()
	}
	c.Set(logFieldsKey, f)
	answered := false
	if h.httpMetrics != nil {
		// A panic the recovery passes on (http.ErrAbortHandler) is
		// counted too; it writes no line.
		defer func() {
			if !answered {
				h.httpMetrics.ObserveRequest(routeOf(c), c.Writer.Status(), time.Since(start))
			}
		}()
	}
	c.Next()
	answered = true
	end, route, status := time.Now(), routeOf(c), c.Writer.Status()
	if h.httpMetrics != nil {
		h.httpMetrics.ObserveRequest(route, status, end.Sub(start))
	}
	h.logRequest(c, route, status, end.Sub(start), end, f)
	*f = logFields{}
	logFieldsPool.Put(f)
}

var keysPool = sync.Pool{New: func() any { return make(map[any]any, 1) }}

// routeOf is c's route template, UnmatchedRoute when it matched none.
func routeOf(c *gin.Context) string {
	if route := c.FullPath(); route != "" {
		return route
	}
	return UnmatchedRoute
}

// logRequest writes the line of a request answered with status at end,
// elapsed after it started.
func (h *handlers) logRequest(c *gin.Context, route string, status int, elapsed time.Duration, end time.Time, f *logFields) {
	level := slog.LevelInfo
	switch {
	case status >= 500:
		level = slog.LevelError
		if status == http.StatusServiceUnavailable || status == http.StatusBadGateway {
			level = slog.LevelWarn // the cause is logged where it happened
		}
	case probeRoutes[route]:
		level = slog.LevelDebug
	}
	ctx := c.Request.Context()
	lh := h.log.Handler()
	if !lh.Enabled(ctx, level) {
		return
	}
	line := reqlog.Line{Method: c.Request.Method, Route: route, Status: status,
		DurationMS: math.Round(float64(elapsed.Microseconds())) / 1000,
		Tenant:     string(f.tenant), Scope: f.scope, KeyHash: f.keyHash, StopReason: f.stopReason, Auth: f.auth, Replayed: f.replayed}
	if w, ok := lh.(reqlog.Writer); ok { // serve's: the line without a record
		w.WriteRequest(end, level, line)
		return
	}
	// The handler directly, as LogAttrs would call it but without the
	// caller's program counter: runtime.Callers on every request, for a
	// source line that would always be this one. The attributes stay in an
	// array on the stack.
	var attrs [10]slog.Attr
	r := slog.NewRecord(end, level, reqlog.Msg, 0)
	r.AddAttrs(line.Attrs(attrs[:0])...)
	_ = lh.Handle(ctx, r)
}

// recovery turns a handler panic into a logged 500 problem. Only the panic
// value's type and the stack are logged: the value may hold request data.
func (h *handlers) recovery(c *gin.Context) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler {
			panic(v)
		}
		h.log.Error("http: handler panicked", slog.String("route", c.FullPath()),
			slog.String("panic_type", fmt.Sprintf("%T", v)), slog.String("stack", string(debug.Stack())))
		if c.Writer.Written() {
			c.Abort()
			return
		}
		c.Writer.Header().Del(pipeline.HeaderLocation)
		c.Writer.Header().Del(pipeline.HeaderKeyRef)
		h.problem(c, pipeline.ProblemFor(errPanic))
		c.Abort()
	}()
	c.Next()
}

// errPanic is the error of a recovered panic; pipeline.ProblemFor maps it to 500.
var errPanic = errors.New("handler panicked")
