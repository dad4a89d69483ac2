package main

import (
	"context"
	"net/http"
	"time"

	"github.com/idemguard/idemguard/internal/config"
	"github.com/idemguard/idemguard/internal/metrics"
	"github.com/idemguard/idemguard/internal/opsui"
)

// operatorStopTimeout bounds the operator listener's shutdown: it stops
// last, so the metrics of the shutdown itself can still be scraped.
const operatorStopTimeout = 2 * time.Second

// listenOperator starts the operator listener (metrics_listen): /metrics,
// the operator page /ops and the service-wide figures /v1/stats, with no
// credential and no CORS, apart from the API's listener that browsers
// reach. With metrics_listen: off it starts nothing (srv nil, addr "",
// served a channel that never reports). ok is false, logged, when it
// cannot listen.
func (s *server) listenOperator(ctx context.Context, m *metrics.Metrics, scopes []string) (
	srv *http.Server, addr string, served chan error, ok bool) {
	if s.cfg.MetricsListen == config.MetricsListenOff {
		return nil, "", nil, true
	}
	o := opsui.OperatorOptions{Metrics: m.Handler(), Logger: s.log}
	if s.db != nil {
		o.Stats = opsui.NewMySQL(s.db, scopes)
	}
	srv, served, ln, ok := s.serveOn(ctx, "metrics_listen", s.cfg.MetricsListen, opsui.Operator(o))
	if !ok {
		return nil, "", nil, false
	}
	return srv, ln.Addr().String(), served, true
}

// stopOperator stops the operator listener, if there is one.
func (s *server) stopOperator(srv *http.Server) {
	if srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), operatorStopTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
	}
}
