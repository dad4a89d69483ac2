package opsui

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers"
	"github.com/idemguard/idemguard/tenancy"
)

// Routes of the operator listener.
const (
	RouteMetrics = "/metrics"
	RoutePage    = "/ops"
	RouteStats   = "/v1/stats"
)

// OperatorOptions configure Operator.
type OperatorOptions struct {
	// Metrics serves /metrics (Prometheus). Required.
	Metrics http.Handler
	// Stats reads the figures; nil (the in-memory store) answers empty series with
	// routers.NoteNoHistory.
	Stats *MySQL
	// Logger receives the errors of reading the figures. Defaults to slog.Default().
	Logger *slog.Logger
}

// Operator is the operator listener's handler: GET /metrics, GET /ops (the page) and GET
// /v1/stats?since=24h[&tenant=acme] (the service-wide counters, and the named tenant's keys).
// It asks for no credential and sends no CORS headers: it is meant for a listener only the
// operator reaches (loopback, a cluster-internal port), never the API's. Anything else is a 404.
func Operator(o OperatorOptions) http.Handler {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+RouteMetrics, o.Metrics)
	mux.Handle("GET "+RoutePage, Handler())
	mux.HandleFunc("GET "+RouteStats, func(w http.ResponseWriter, r *http.Request) { serveOperatorStats(w, r, o.Stats, log) })
	return mux
}

// serveOperatorStats answers GET /v1/stats on the operator listener.
func serveOperatorStats(w http.ResponseWriter, r *http.Request, src *MySQL, log *slog.Logger) {
	q := r.URL.Query()
	since := routers.DefaultStatsSince
	if v := q.Get("since"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < routers.MinStatsSince || d > routers.MaxStatsSince {
			problem(w, http.StatusBadRequest, "since is a duration from "+routers.MinStatsSince.String()+" to "+routers.MaxStatsSince.String()+", e.g. since=24h")
			return
		}
		since = d
	}
	var tenant tenancy.ID
	if v := q.Get("tenant"); v != "" {
		id, err := tenancy.ParseID(v)
		if err != nil {
			problem(w, http.StatusBadRequest, "tenant is a tenant ID: 1 to 64 characters of [A-Za-z0-9._-]")
			return
		}
		tenant = id
	}
	st := routers.Stats{Tenant: string(tenant), Store: "memory", SinceSeconds: int64(since / time.Second),
		Note: routers.NoteNoHistory, Scopes: []routers.ScopeHour{}, Keys: []routers.KeyHour{}}
	if src != nil {
		var err error
		if st, err = src.OperatorStats(r.Context(), tenant, since); err != nil {
			log.Warn("ops: reading the operator's figures", slog.Any("err", err))
			status := http.StatusInternalServerError
			if errors.Is(err, idemguard.ErrStoreUnavailable) {
				status = http.StatusServiceUnavailable
			}
			problem(w, status, "the figures could not be read")
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(st)
}

// problem writes an RFC 9457 problem with detail.
func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail})
}
