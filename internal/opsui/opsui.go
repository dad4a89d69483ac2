// Package opsui is the operator's view: the operator listener of `idemguard serve`
// (config metrics_listen, apart from the API's listener) serves, with /metrics, the operator page
// at /ops and the service-wide figures behind it at /v1/stats (Operator); and the MySQL source of
// the figures (MySQL), which also answers a tenant's own figures on the API (routers.Options.Stats).
//
// The page is a static shell (HTML, an inline script drawing SVG, no third-party code). It asks
// for no credential: the operator listener is the operator's (bound to loopback by default, a
// cluster-internal port in Kubernetes), never reached by the browsers of the API's users, so no
// tenant's API key is ever typed into a browser for it.
//
// Two kinds of figures come back:
//
//   - Scopes: the protocol counters of idempotency_stats (requests, replays, conflicts,
//     takeovers, failures, store errors) per hour and scope. That table is counted per scope for
//     the whole service, not per tenant: only the operator's view holds them; a tenant's answer
//     on the API has none.
//   - Keys: one tenant's keys of idempotency_keys created per hour and scope, by status. The API
//     answers the caller's tenant's; the operator's view those of the tenant it names (?tenant=).
//
// With the in-memory store there is no table to read: the answers are empty series with a note.
package opsui

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/internal/webui"
	"github.com/idemguard/idemguard/routers"
	"github.com/idemguard/idemguard/tenancy"
)

// Notes of the answers read from MySQL: a tenant's (the API) and the operator's.
const (
	NoteMySQL    = "keys: your tenant's keys only, by status now; the service-wide protocol counters are the operator's (the operator listener)"
	NoteOperator = "scopes: counted per scope for every tenant of this service; keys: the named tenant's, by status now"
)

var _ routers.StatsSource = (*MySQL)(nil)

// MySQL is the routers.StatsSource of a server on MySQL: it reads idempotency_stats and
// idempotency_keys through the MySQL store (mysqlstore.StatsHours, mysqlstore.KeyHours).
type MySQL struct {
	db *sqlx.DB
	// scopes are the scopes this server serves; rows of others (removed scopes, the recorder's
	// overflow bucket) are left out.
	scopes map[string]bool
}

// NewMySQL returns a MySQL source on db (from mysqlconn.Open, migrated) for the given scopes.
func NewMySQL(db *sqlx.DB, scopes []string) *MySQL {
	m := &MySQL{db: db, scopes: make(map[string]bool, len(scopes))}
	for _, s := range scopes {
		m.scopes[s] = true
	}
	return m
}

// hourString renders an hour bucket; the database returns them as DATETIME in UTC.
func hourString(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// Stats is a tenant's own figures over the window [now - since, now] of the database clock: its
// keys, never the service-wide counters. A database error is returned wrapped in
// idemguard.ErrStoreUnavailable (the API answers 503).
func (m *MySQL) Stats(ctx context.Context, tenant tenancy.ID, since time.Duration) (routers.Stats, error) {
	return m.read(ctx, tenant, since, false)
}

// OperatorStats is the operator's view over the same window: the service-wide counters per scope
// and, when tenant is not empty, that tenant's keys.
func (m *MySQL) OperatorStats(ctx context.Context, tenant tenancy.ID, since time.Duration) (routers.Stats, error) {
	return m.read(ctx, tenant, since, true)
}

func (m *MySQL) read(ctx context.Context, tenant tenancy.ID, since time.Duration, operator bool) (routers.Stats, error) {
	out := routers.Stats{Tenant: string(tenant), Store: "mysql", SinceSeconds: int64(since / time.Second), Note: NoteMySQL,
		Scopes: []routers.ScopeHour{}, Keys: []routers.KeyHour{}}
	if operator {
		out.Note = NoteOperator
	}
	fail := func(what string, err error) (routers.Stats, error) {
		return routers.Stats{}, fmt.Errorf("opsui: reading %s: %w: %w", what, idemguard.ErrStoreUnavailable, err)
	}
	now, err := mysqlstore.DBNow(ctx, m.db)
	if err != nil {
		return fail("the database clock", err)
	}
	from := now.Add(-since.Truncate(time.Microsecond))
	out.From, out.To = from.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)

	if operator {
		// The bucket holding the window's start counts too: buckets are hourly.
		hours, err := mysqlstore.StatsHours(ctx, m.db, from)
		if err != nil {
			return fail("idempotency_stats", err)
		}
		for _, h := range hours {
			if m.scopes[h.Scope] {
				out.Scopes = append(out.Scopes, scopeHour(h))
			}
		}
	}
	if tenant == "" {
		return out, nil
	}

	// The tenant's own keys: a range of uk_idempotency_tenant_scope_key on the tenant, read
	// once per page load (a day of one tenant's keys at most a week old, the longest TTL).
	keys, err := mysqlstore.KeyHours(ctx, m.db, string(tenant), from)
	if err != nil {
		return fail("idempotency_keys", err)
	}
	for _, k := range keys {
		out.Keys = append(out.Keys, routers.KeyHour{Hour: hourString(k.Hour), Scope: k.Scope, Created: k.Created,
			Succeeded: k.Succeeded, Failed: k.Failed, Started: k.Started})
	}
	return out, nil
}

// scopeHour is an idempotency_stats bucket as the API shows it.
func scopeHour(h mysqlstore.ScopeHour) routers.ScopeHour {
	r := routers.ScopeHour{Hour: hourString(h.Hour), Scope: h.Scope}
	for i, p := range []*int64{&r.Requests, &r.Claims, &r.Retries, &r.Takeovers, &r.Replays, &r.InProgress,
		&r.RetryLimits, &r.Mismatches, &r.Failures, &r.LostClaims, &r.StoreErrors, &r.Resets} { // mysqlstore.StatsColumns' order
		*p = h.Counters[i]
	}
	return r
}

//go:embed page.html
var pageHTML string

//go:embed page.js
var pageJS string

// page is the served document: the script inline, allowed by its hash in the policy, so the page
// is one request and runs no script it did not ship.
var page, contentSecurityPolicy = func() (string, string) {
	sum := sha256.Sum256([]byte(pageJS))
	csp := "default-src 'none'; script-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; " +
		"style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
	return strings.Replace(pageHTML, "<!--script-->", "<script>"+pageJS+"</script>", 1), csp
}()

// Handler serves the page (GET and HEAD).
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		webui.SetPageHeaders(h, contentSecurityPolicy)
		h.Set("Content-Type", "text/html; charset=utf-8")
		if r.Method != http.MethodHead {
			_, _ = w.Write([]byte(page))
		}
	})
}
