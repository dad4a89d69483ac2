package routers

// Failed authentications, limited per client address.

import (
	"container/list"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

// Defaults of AuthFailureLimit.
const (
	DefaultAuthFailureMax        = 20
	DefaultAuthFailureWindow     = time.Minute
	DefaultAuthFailureMaxClients = 10_000
)

// AuthFailureLimit limits failed authentications per client address (the
// host of the connection's remote address; X-Forwarded-For is not
// trusted). After Max failures within Window a client's requests are
// answered 429 too-many-failed-authentications, with Retry-After until the
// window ends, before their credential is checked. The zero value takes
// the defaults; Max -1 turns the limit off.
type AuthFailureLimit struct {
	// Max is the failures allowed per client and window. Defaults to
	// DefaultAuthFailureMax; -1: no limit.
	Max int
	// Window is how long failures are counted from a client's first one.
	// Defaults to DefaultAuthFailureWindow.
	Window time.Duration
	// MaxClients bounds the clients tracked; over it the client whose
	// window began first is forgotten. Defaults to
	// DefaultAuthFailureMaxClients.
	MaxClients int
	// OnLimited, if set, is called for every request answered 429 by the
	// limit (e.g. to count it in a metric).
	OnLimited func()
	// Now is the clock (tests); defaults to time.Now.
	Now func() time.Time
}

// authFailures is the state of an AuthFailureLimit.
type authFailures struct {
	limit AuthFailureLimit
	log   *slog.Logger

	mu      sync.Mutex
	clients map[string]*list.Element // of *failedClient
	order   *list.List               // by window start, oldest first
	// tracked is len(clients), written under mu: while no client is
	// tracked (no recent failure), blocked answers without the lock or the
	// clock, which every authenticated request would otherwise pay.
	tracked atomic.Int64
}

type failedClient struct {
	host   string
	start  time.Time
	count  int
	logged bool
}

func newAuthFailures(l AuthFailureLimit, log *slog.Logger) *authFailures {
	if l.Max == 0 {
		l.Max = DefaultAuthFailureMax
	}
	if l.Max < 0 {
		return nil
	}
	if l.Window <= 0 {
		l.Window = DefaultAuthFailureWindow
	}
	if l.MaxClients <= 0 {
		l.MaxClients = DefaultAuthFailureMaxClients
	}
	if l.Now == nil {
		l.Now = time.Now
	}
	return &authFailures{limit: l, log: log, clients: make(map[string]*list.Element), order: list.New()}
}

// clientHost is the host of r's remote address (the whole of it when it
// has no port).
func clientHost(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// blocked reports how long the client at host must wait, 0 if it may try.
func (f *authFailures) blocked(host string) time.Duration {
	if f.none() {
		return 0
	}
	now := f.limit.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.clients[host]
	if !ok {
		return 0
	}
	fc := e.Value.(*failedClient)
	left := fc.start.Add(f.limit.Window).Sub(now)
	if left <= 0 {
		f.forget(e)
		return 0
	}
	if fc.count < f.limit.Max {
		return 0
	}
	return left
}

// none reports whether no client is tracked (f nil: no limit).
func (f *authFailures) none() bool { return f == nil || f.tracked.Load() == 0 }

// forget stops tracking the client of e. f.mu is held.
func (f *authFailures) forget(e *list.Element) {
	f.order.Remove(e)
	delete(f.clients, e.Value.(*failedClient).host)
	f.tracked.Store(int64(len(f.clients)))
}

// failed counts a failed authentication of the client at host.
func (f *authFailures) failed(host string) {
	if f == nil {
		return
	}
	now := f.limit.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.clients[host]
	if ok && !now.Before(e.Value.(*failedClient).start.Add(f.limit.Window)) {
		f.forget(e)
		ok = false
	}
	if !ok {
		for len(f.clients) >= f.limit.MaxClients {
			f.forget(f.order.Front())
		}
		e = f.order.PushBack(&failedClient{host: host, start: now})
		f.clients[host] = e
		f.tracked.Store(int64(len(f.clients)))
	}
	fc := e.Value.(*failedClient)
	fc.count++
	if fc.count >= f.limit.Max && !fc.logged {
		fc.logged = true
		f.log.Warn("http: too many failed authentications from one client; refusing it until its window ends",
			slog.String("client", host), slog.Int("failures", fc.count),
			slog.Float64("window_seconds", f.limit.Window.Seconds()))
	}
}

// refuseBlocked answers 429 when the client may not try now, and reports
// whether it did.
func (h *handlers) refuseBlocked(c *gin.Context) bool {
	if h.authFails.none() { // the usual case: the client's address is not even parsed
		return false
	}
	wait := h.authFails.blocked(clientHost(c.Request))
	if wait <= 0 {
		return false
	}
	if h.authFails.limit.OnLimited != nil {
		h.authFails.limit.OnLimited()
	}
	c.Header(pipeline.HeaderRetryAfter, pipeline.RetryAfterSeconds(wait))
	h.problem(c, pipeline.ProblemFor(pipeline.ErrTooManyAuthFailures))
	c.Abort()
	return true
}
