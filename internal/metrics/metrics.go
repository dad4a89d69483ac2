// Package metrics turns the guard's protocol events (idemguard.Event) into
// Prometheus metrics on a registry of its own, never the global default one.
//
// Every metric is labelled by scope; scopes come from the configuration, and
// the HTTP layer answers 404 for any other, so the label's cardinality is
// bounded by the config file. The other labels are closed sets: from_memory
// (true/false), stop_reason (sanitize's enum), op (the guard's store steps).
//
//	idemguard_claims_total{scope}                       a fresh (or expired) key was claimed
//	idemguard_replays_total{scope,from_memory}          a stored success was answered
//	idemguard_in_progress_total{scope}                  a duplicate found the operation running (409)
//	idemguard_takeovers_total{scope}                    a stale claim was taken over
//	idemguard_retries_total{scope}                      a failed key was claimed for another attempt
//	idemguard_resets_total{scope,kind}                  a finished key's answer was reset (kind reset) or replaced by a forced run (kind forced)
//	idemguard_abandoned_total{scope,stop_reason}        a stale claim was marked failed
//	idemguard_retry_limit_total{scope,stop_reason}      a failed key had no attempts left
//	idemguard_lost_claims_total{scope}                  an operation finished after losing its claim
//	idemguard_fingerprint_mismatches_total{scope}       a client key was reused with other inputs (422)
//	idemguard_operations_total{scope,outcome}           operations run, outcome succeeded|failed
//	idemguard_operation_failures_total{scope,stop_reason} operations that failed, by reason
//	idemguard_store_errors_total{scope,op}              store calls that failed
//	idemguard_operation_duration_seconds{scope}         histogram: how long operations ran
//	idemguard_wait_seconds{scope}                       histogram: how long requests waited (Prefer: wait)
//	idemguard_http_requests_total{route,status_class}   HTTP requests answered, by gin route template and 2xx..5xx
//	idemguard_http_request_duration_seconds{route,status_class} histogram: time to answer
//	idemguard_auth_limited_total                        requests refused (429) after too many failed authentications from their client
//	idemguard_avoided_calls_total{scope}                operations not run again because a stored result answered
//	idemguard_avoided_tokens_total{scope,kind}          model tokens those calls would have used, kind prompt|completion
//	idemguard_avoided_cost_total{scope}                 what those calls would have cost, in the scope's price currency
//	idemguard_audit_events_total{kind}                  audit events decided (store.AuditKinds), whatever their sinks
//	idemguard_audit_dropped_total{sink,reason}          audit events a sink lost: sink store (the batched
//	                                                    table writes: queue_full|store) or stream (serve's
//	                                                    --audit-log: queue_full|write_error)
//	idemguard_dropped_fields_total{scope,kind}          answer fields the allowlist dropped, kind field|stream_events
//	                                                    (the names are logged, bounded per tenant: never a label)
//	idemguard_store_up                                  gauge: 1 if the last store probe answered, else 0
//	idemguard_store_probe_duration_seconds              histogram: round trip of the periodic store probe
//
// Every counter series exists from the start, at zero, for every known label
// value (InitScopes, InitRoutes): a dashboard shows 0 rather than "no data",
// and an alert on rate() or increase() works before the first event. The
// route label is the route template (/v1/ops/:scope), never the raw path,
// which holds client keys; requests that match no route are "unmatched".
//
// plus the Go runtime and process collectors. `idemguard cleanup` runs as a
// cron job, not in the server, so its figures go to a node_exporter textfile
// instead (WriteCleanupTextfile).
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// Namespace prefixes every metric name.
const Namespace = "idemguard"

// Metrics holds idemguard's collectors and their registry. Observe is safe
// for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	claims, inProgress, takeovers, retries, lostClaims, mismatches *prometheus.CounterVec
	resets                                                         *prometheus.CounterVec
	replays, abandoned, retryLimit, operations, failures           *prometheus.CounterVec
	storeErrors, httpRequests, droppedFields                       *prometheus.CounterVec
	auditEvents, auditDropped                                      *prometheus.CounterVec
	avoidedCalls, avoidedTokens, avoidedCost                       *prometheus.CounterVec
	opDuration, wait, httpDuration                                 *prometheus.HistogramVec
	storeUp                                                        prometheus.Gauge
	authLimited                                                    prometheus.Counter
	storeProbe                                                     prometheus.Histogram
	hot                                                            hot // hot.go
}

// TokenKinds are the values of the kind label of idemguard_avoided_tokens_total.
var TokenKinds = []string{"prompt", "completion"}

// ProbeBuckets are the store probe's buckets, in seconds: a round trip to a
// healthy database on the same network takes about a millisecond; past the
// store timeout (5s by default) the probe has failed.
var ProbeBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// StoreOps are the values of the op label of idemguard_store_errors_total: the guard's store
// steps (idemguard.Event.StoreOp). A test checks the engine names no other.
var StoreOps = []string{"claim", "read", "reclaim expired", "reclaim stale", "reclaim failed", "abandon", "commit", "heartbeat"}

// Values of the kind label of idemguard_dropped_fields_total.
const (
	DroppedField        = "field"         // a field of an operation's answer
	DroppedStreamEvents = "stream_events" // a stream's events over the size limit
)

// Values of the labels of idemguard_audit_dropped_total: the sinks, and
// per sink the reasons an event is lost. The store's reasons are the
// engine's (idemguard.Event.Field of EventAuditDropped).
const (
	AuditSinkStore  = "store"
	AuditSinkStream = "stream"

	AuditDropQueueFull  = "queue_full"  // the sink's queue was full: dropped, never waited for
	AuditDropStore      = "store"       // the store refused the batch
	AuditDropWriteError = "write_error" // the stream's file or pipe refused the line
)

// AuditDropReasons lists, per sink, the reasons exported from the start.
var AuditDropReasons = map[string][]string{
	AuditSinkStore:  {AuditDropQueueFull, AuditDropStore},
	AuditSinkStream: {AuditDropQueueFull, AuditDropWriteError},
}

// StatusClasses are the values of the status_class label.
var StatusClasses = []string{"2xx", "3xx", "4xx", "5xx"}

// HTTPBuckets are the request-duration histogram's buckets, in seconds: from
// a replay answered from memory (under a millisecond) to a long operation.
var HTTPBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// OperationBuckets are the operation-duration histogram's buckets, in seconds:
// AI calls take from tens of milliseconds (a cached provider answer) to
// minutes (a long completion).
var OperationBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300}

// WaitBuckets are the wait histogram's buckets, in seconds: a request waits
// (Prefer: wait=N) at most max_wait, 30s by default and 5m at most.
var WaitBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300}

// New returns Metrics on a fresh registry.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	m.claims = counter("claims_total", "Keys claimed for a first execution (fresh or expired).", "scope")
	m.replays = counter("replays_total", "Stored successes answered to a duplicate request; from_memory when the in-process replay cache answered.", "scope", "from_memory")
	m.inProgress = counter("in_progress_total", "Duplicate requests answered in_progress (HTTP 409) because the operation was running.", "scope")
	m.takeovers = counter("takeovers_total", "Stale claims (owner silent for staleAfter) taken over and run again.", "scope")
	m.retries = counter("retries_total", "Failed keys claimed for another attempt.", "scope")
	m.resets = counter("resets_total", "Finished keys run again on request: kind reset (the stored answer was reset) or forced (a forced run replaced it).", "scope", "kind")
	m.abandoned = counter("abandoned_total", "Stale claims marked failed instead of taken over (policy fail, or no attempts left).", "scope", "stop_reason")
	m.retryLimit = counter("retry_limit_total", "Requests for a failed key with no attempts left.", "scope", "stop_reason")
	m.lostClaims = counter("lost_claims_total", "Operations that finished after another caller took their claim over; their result was not stored.", "scope")
	m.mismatches = counter("fingerprint_mismatches_total", "Client keys reused with different inputs (HTTP 422).", "scope")
	m.operations = counter("operations_total", "Operations run, by outcome (succeeded or failed).", "scope", "outcome")
	m.failures = counter("operation_failures_total", "Operations that failed, by stop reason.", "scope", "stop_reason")
	m.storeErrors = counter("store_errors_total", "Store calls that failed, by protocol step.", "scope", "op")
	m.avoidedCalls = counter("avoided_calls_total", "Operations not run again because a stored result (a replay, or an attached waiter) answered.", "scope")
	m.avoidedTokens = counter("avoided_tokens_total", "Model tokens the avoided calls would have used, by kind (prompt or completion).", "scope", "kind")
	m.avoidedCost = counter("avoided_cost_total", "What the avoided calls would have cost, in the currency of the scope's configured prices per million tokens (0 without prices).", "scope")
	m.storeUp = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "store_up",
		Help: "1 if the last periodic store probe answered within the store timeout, else 0."})
	m.storeProbe = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: Namespace, Name: "store_probe_duration_seconds",
		Help: "Round trip of the periodic store probe (a ping of the database), failed probes included.", Buckets: ProbeBuckets})
	m.reg.MustRegister(m.storeUp, m.storeProbe)
	m.droppedFields = counter("dropped_fields_total", "Fields of operation results that the response allowlist dropped, by scope and kind (field: a field of the answer, stream_events: a stream's events over the size limit). The field names are in the log and on the key record, never in a label: they come from answers.", "scope", "kind")
	m.auditEvents = counter("audit_events_total", "Idempotency decisions recorded by the audit trail, by kind (counted once, whatever the sinks).", "kind")
	m.auditDropped = counter("audit_dropped_total", "Audit events a sink lost, by sink (store: the batched table writes; stream: the --audit-log stream) and reason. The table's durable kinds are never dropped.", "sink", "reason")
	m.hot.audit = map[string]prometheus.Counter{}
	for _, k := range store.AuditKinds() {
		m.hot.audit[string(k)] = m.auditEvents.WithLabelValues(string(k))
	}
	for sink, reasons := range AuditDropReasons {
		for _, r := range reasons {
			m.auditDropped.WithLabelValues(sink, r)
		}
	}
	m.opDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "operation_duration_seconds",
		Help: "How long guarded operations ran, successful or not.", Buckets: OperationBuckets}, []string{"scope"})
	m.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "wait_seconds",
		Help:    "How long requests waited (Prefer: wait) for a running duplicate to finish; one observation per request that waited.",
		Buckets: WaitBuckets}, []string{"scope"})
	m.httpRequests = counter("http_requests_total", "HTTP requests answered, by route template (unmatched: no route) and status class.", "route", "status_class")
	m.authLimited = prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "auth_limited_total",
		Help: "Requests refused (429) before their credential was checked, their client having failed to authenticate too often."})
	m.reg.MustRegister(m.authLimited)
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "http_request_duration_seconds",
		Help: "Time to answer an HTTP request, by route template and status class.", Buckets: HTTPBuckets}, []string{"route", "status_class"})
	m.reg.MustRegister(m.opDuration, m.wait, m.httpDuration,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Observe records one event of the guard (a protocol step, or an audit
// decision: EventAudit). Pass it as idemguard.Config.Observe.
func (m *Metrics) Observe(e idemguard.Event) {
	switch e.Kind {
	case idemguard.EventClaimed:
		if s := m.scopeOf(e.Scope); s != nil {
			s.claims.Inc()
			return
		}
		m.claims.WithLabelValues(e.Scope).Inc()
	case idemguard.EventReplayed:
		if s := m.scopeOf(e.Scope); s != nil {
			s.replays[btoi(e.FromMemory)].Inc()
			return
		}
		m.replays.WithLabelValues(e.Scope, strconv.FormatBool(e.FromMemory)).Inc()
	case idemguard.EventInProgress:
		m.inProgress.WithLabelValues(e.Scope).Inc()
	case idemguard.EventWaited:
		m.wait.WithLabelValues(e.Scope).Observe(e.Duration.Seconds())
	case idemguard.EventTakeover:
		m.takeovers.WithLabelValues(e.Scope).Inc()
	case idemguard.EventRetried:
		m.retries.WithLabelValues(e.Scope).Inc()
	case ResetKindReset, ResetKindForced:
		m.resets.WithLabelValues(e.Scope, string(e.Kind)).Inc()
	case idemguard.EventAbandoned:
		m.abandoned.WithLabelValues(e.Scope, string(e.StopReason)).Inc()
	case idemguard.EventRetryLimit:
		m.retryLimit.WithLabelValues(e.Scope, string(e.StopReason)).Inc()
	case idemguard.EventLostClaim:
		m.lostClaims.WithLabelValues(e.Scope).Inc()
	case idemguard.EventMismatch:
		m.mismatches.WithLabelValues(e.Scope).Inc()
	case idemguard.EventOperation:
		m.observeOperation(e)
	case idemguard.EventStoreError:
		m.storeErrors.WithLabelValues(e.Scope, e.StoreOp).Inc()
	case idemguard.EventDroppedField:
		// Never e.Field as a label: field names come from answers (an
		// echoing upstream could mint a series per request).
		m.droppedFields.WithLabelValues(e.Scope, DroppedField).Inc()
	case idemguard.EventStreamDropped:
		m.droppedFields.WithLabelValues(e.Scope, DroppedStreamEvents).Inc()
	case idemguard.EventAuditDropped:
		m.auditDropped.WithLabelValues(AuditSinkStore, auditReason(AuditSinkStore, e.Field)).Inc()
	case idemguard.EventAudit:
		// One count per decision, whatever sinks it goes to.
		if e.Audit == nil {
			return
		}
		if c, ok := m.hot.audit[string(e.Audit.Kind)]; ok {
			c.Inc()
			return
		}
		m.auditEvents.WithLabelValues(auditKind(e.Audit.Kind)).Inc()
	}
}

// observeOperation records one execution's duration and outcome.
func (m *Metrics) observeOperation(e idemguard.Event) {
	if e.Failed {
		m.failures.WithLabelValues(e.Scope, string(e.StopReason)).Inc()
	}
	if s := m.scopeOf(e.Scope); s != nil {
		s.opDuration.Observe(e.Duration.Seconds())
		s.operations[btoi(e.Failed)].Inc()
		return
	}
	m.opDuration.WithLabelValues(e.Scope).Observe(e.Duration.Seconds())
	outcome := "succeeded"
	if e.Failed {
		outcome = "failed"
	}
	m.operations.WithLabelValues(e.Scope, outcome).Inc()
}

// auditReason keeps the reason label a closed set: a reason the sink does
// not list is counted as "other".
func auditReason(sink, reason string) string {
	for _, r := range AuditDropReasons[sink] {
		if r == reason {
			return r
		}
	}
	return "other"
}

func auditKind(k store.AuditKind) string {
	for _, known := range store.AuditKinds() {
		if k == known {
			return string(k)
		}
	}
	return "other"
}

// AuditStreamDropped counts one audit event the stream lost (reason
// AuditDropQueueFull or AuditDropWriteError).
func (m *Metrics) AuditStreamDropped(reason string) {
	m.auditDropped.WithLabelValues(AuditSinkStream, auditReason(AuditSinkStream, reason)).Inc()
}

// failureReasons are the stop reasons a failed operation, an abandoned claim or a retry limit
// can carry: the enum without the successes and the in-progress answer.
func failureReasons() []string {
	var out []string
	for _, r := range sanitize.StopReasons() {
		switch r {
		case sanitize.Completed, sanitize.InProgress, sanitize.NeedsHuman:
		default:
			out = append(out, string(r))
		}
	}
	return out
}

// The kinds of Event a reset and a forced run report (the guard's own names;
// they are not Watch transitions), and the kind label of resets_total.
const (
	ResetKindReset  idemguard.EventKind = "reset"
	ResetKindForced idemguard.EventKind = "forced"
)

// InitScopes creates, at zero, every series of the guard's metrics for each scope and every
// value of the other labels, so that they are exported before the first event. Call it with
// the configured scopes before serving.
func (m *Metrics) InitScopes(scopes ...string) {
	reasons := failureReasons()
	for _, sc := range scopes {
		for _, c := range []*prometheus.CounterVec{m.claims, m.inProgress, m.takeovers, m.retries, m.lostClaims, m.mismatches} {
			c.WithLabelValues(sc)
		}
		for _, k := range []idemguard.EventKind{ResetKindReset, ResetKindForced} {
			m.resets.WithLabelValues(sc, string(k))
		}
		m.replays.WithLabelValues(sc, "true")
		m.replays.WithLabelValues(sc, "false")
		m.operations.WithLabelValues(sc, "succeeded")
		m.operations.WithLabelValues(sc, "failed")
		for _, r := range reasons {
			m.abandoned.WithLabelValues(sc, r)
			m.retryLimit.WithLabelValues(sc, r)
			m.failures.WithLabelValues(sc, r)
		}
		for _, op := range StoreOps {
			m.storeErrors.WithLabelValues(sc, op)
		}
		m.opDuration.WithLabelValues(sc)
		m.wait.WithLabelValues(sc)
		m.avoidedCalls.WithLabelValues(sc)
		m.avoidedCost.WithLabelValues(sc)
		for _, k := range TokenKinds {
			m.avoidedTokens.WithLabelValues(sc, k)
		}
		m.droppedFields.WithLabelValues(sc, DroppedField)
		m.droppedFields.WithLabelValues(sc, DroppedStreamEvents)
	}
	m.keepScopes(scopes)
}

// AvoidedCall credits one call that a stored result answered instead of running the operation
// again: a replay, or a waiter that attached to the running execution. promptTokens and
// completionTokens are the original execution's usage, cost what it would have cost (0 when the
// scope has no prices). Negative figures are counted as 0: a counter never goes down.
func (m *Metrics) AvoidedCall(scope string, promptTokens, completionTokens int64, cost float64) {
	if s := m.scopeOf(scope); s != nil {
		s.avoidedCalls.Inc()
		s.avoidedPrompt.Add(float64(max(promptTokens, 0)))
		s.avoidedCompletion.Add(float64(max(completionTokens, 0)))
		if cost > 0 {
			s.avoidedCost.Add(cost)
		}
		return
	}
	m.avoidedCalls.WithLabelValues(scope).Inc()
	m.avoidedTokens.WithLabelValues(scope, "prompt").Add(float64(max(promptTokens, 0)))
	m.avoidedTokens.WithLabelValues(scope, "completion").Add(float64(max(completionTokens, 0)))
	if cost > 0 { // also false for NaN
		m.avoidedCost.WithLabelValues(scope).Add(cost)
	}
}

// ObserveStoreProbe records one store probe: its round trip, and whether the store answered.
func (m *Metrics) ObserveStoreProbe(elapsed time.Duration, err error) {
	m.storeProbe.Observe(elapsed.Seconds())
	if err != nil {
		m.storeUp.Set(0)
		return
	}
	m.storeUp.Set(1)
}

// ProbeStore calls ping at once and then every interval until ctx ends, recording each call with
// ObserveStoreProbe. Each call is bounded by timeout. Requests alone would say nothing about the
// store while traffic is quiet, and a store that is down makes every request fail at once; the
// probe gives idemguard_store_up and a latency that do not depend on traffic.
func (m *Metrics) ProbeStore(ctx context.Context, ping func(context.Context) error, interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		err := ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return // shutting down: a cancelled probe says nothing about the store
		}
		m.ObserveStoreProbe(time.Since(start), err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// InitRoutes creates, at zero, the HTTP series of each route template for every status class.
// routers.New calls it with the routes it serves.
func (m *Metrics) InitRoutes(routes []string) {
	for _, r := range routes {
		for _, class := range StatusClasses {
			m.httpRequests.WithLabelValues(r, class)
			m.httpDuration.WithLabelValues(r, class)
		}
	}
	m.keepRoutes(routes)
}

// AuthLimited counts one request refused by the failed-authentication
// limit (routers.AuthFailureLimit.OnLimited).
func (m *Metrics) AuthLimited() { m.authLimited.Inc() }

// ObserveRequest records one answered HTTP request. route is the route template, never the
// raw path.
func (m *Metrics) ObserveRequest(route string, status int, elapsed time.Duration) {
	class, i := statusClass(status)
	if s := m.routeOf(route); s != nil && i >= 0 {
		s.requests[i].Inc()
		s.duration[i].Observe(elapsed.Seconds())
		return
	}
	m.httpRequests.WithLabelValues(route, class).Inc()
	m.httpDuration.WithLabelValues(route, class).Observe(elapsed.Seconds())
}

// Registry returns the registry the metrics are registered on, to add
// collectors of one's own or to push them (e.g. to a Pushgateway).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// CleanupRun is what one `idemguard cleanup` run reports.
type CleanupRun struct {
	Deleted  int64
	Batches  int
	Duration time.Duration
	OK       bool // finished (or stopped at --max-duration) without a database error
	At       time.Time
}

// WriteCleanupTextfile writes the run's figures to path in the Prometheus text
// format, atomically (temp file, then rename), for node_exporter's textfile
// collector: a cron job has no /metrics of its own. Alert on
// time() - idemguard_cleanup_last_success_timestamp_seconds > 26h.
func WriteCleanupTextfile(path string, run CleanupRun) error {
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, v float64) {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: name, Help: help})
		g.Set(v)
		reg.MustRegister(g)
	}
	gauge("cleanup_deleted_rows", "Expired rows the last cleanup run deleted.", float64(run.Deleted))
	gauge("cleanup_batches", "DELETE batches the last cleanup run committed.", float64(run.Batches))
	gauge("cleanup_duration_seconds", "How long the last cleanup run took.", run.Duration.Seconds())
	gauge("cleanup_last_run_timestamp_seconds", "When the last cleanup run ended (Unix time).", float64(run.At.Unix()))
	ok := 0.0
	if run.OK {
		ok = 1
	}
	gauge("cleanup_success", "1 if the last cleanup run ended without a database error, else 0.", ok)
	if run.OK {
		gauge("cleanup_last_success_timestamp_seconds", "When the last successful cleanup run ended (Unix time).", float64(run.At.Unix()))
	}
	return prometheus.WriteToTextfile(path, reg)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
