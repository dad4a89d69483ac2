package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/browsertest"
	"github.com/idemguard/idemguard/internal/opsui"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/routers"
	"github.com/idemguard/idemguard/routers/auth"
)

// opsServer is a production serve on a fresh database holding a known past: hourly counters of
// the "demo" scope 1 to 4 hours ago (requests 11..14, replays 1..4), counters of a scope the
// server no longer serves and of a day outside the window, and keys of two tenants (acme 2, beta
// 3) made through the API.
func opsServer(t *testing.T) *served {
	t.Helper()
	db := testdb.New(t)
	for h := 1; h <= 4; h++ {
		_, err := db.DB.Exec(`INSERT INTO idempotency_stats (bucket_start, scope, requests, claims, replays, in_progress, takeovers, updated_at)
			VALUES (DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL ? HOUR, '%Y-%m-%d %H:00:00'), 'demo', ?, ?, ?, 1, ?, UTC_TIMESTAMP(6))`,
			h, 10+h, 9, h, h%2)
		require.NoError(t, err)
	}
	for _, row := range []struct {
		ago   string
		scope string
	}{{"2 HOUR", "removed-scope"}, {"3 DAY", "demo"}} {
		_, err := db.DB.Exec(`INSERT INTO idempotency_stats (bucket_start, scope, requests, replays, updated_at)
			VALUES (DATE_FORMAT(UTC_TIMESTAMP() - INTERVAL `+row.ago+`, '%Y-%m-%d %H:00:00'), ?, 999, 999, UTC_TIMESTAMP(6))`, row.scope)
		require.NoError(t, err)
	}
	env := productionEnv(db.DSN)
	env["IDEMGUARD_API_KEYS"] = "acme:" + auth.HashAPIKey("acme-key") + ",beta:" + auth.HashAPIKey("beta-key")
	s := startServe(t, env, "scopes: [{name: demo, operation: demo, delay: 1ms}]\n")
	for i, tenantKey := range []string{"acme-key", "acme-key", "beta-key", "beta-key", "beta-key"} {
		resp, body := s.post(t, "/v1/ops/demo", tenantKey, fmt.Sprintf("ops-%d", i), `{}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	}
	return s
}

func TestOpsStatsFromMySQL(t *testing.T) {
	t.Parallel()
	s := opsServer(t)

	// The operator listener: the service-wide counters, and the keys of the tenant named.
	resp, body := s.operator(t, "/v1/stats?since=24h&tenant=acme")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var st routers.Stats
	require.NoError(t, json.Unmarshal(body, &st))
	require.Equal(t, "acme", st.Tenant)
	require.Equal(t, "mysql", st.Store)
	require.Equal(t, opsui.NoteOperator, st.Note)
	require.Equal(t, int64(86400), st.SinceSeconds)
	from, err := time.Parse(time.RFC3339, st.From)
	require.NoError(t, err)
	to, err := time.Parse(time.RFC3339, st.To)
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, to.Sub(from).Round(time.Second))

	var requests, replays int64
	for _, r := range st.Scopes {
		require.Equal(t, "demo", r.Scope, "rows of scopes the server does not serve are left out")
		require.False(t, strings.HasSuffix(r.Hour, "Z") && r.Hour < st.From[:14]+"00:00Z", "row %s is before the window", r.Hour)
		if r.Hour < to.Truncate(time.Hour).Format(time.RFC3339) { // the seeded past; the current hour is the recorder's
			requests += r.Requests
			replays += r.Replays
		}
	}
	require.Equal(t, int64(11+12+13+14), requests)
	require.Equal(t, int64(1+2+3+4), replays)

	var created, succeeded int64
	for _, k := range st.Keys {
		created += k.Created
		succeeded += k.Succeeded
	}
	require.Equal(t, int64(2), created, "acme's 2 keys, not beta's 3")
	require.Equal(t, int64(2), succeeded)

	// A tenant on the API: its own keys, and no service-wide counter (on the code before, beta
	// read the demo scope's counters of every tenant's calls).
	resp, body = s.get(t, "/v1/stats", "beta-key")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	st = routers.Stats{}
	require.NoError(t, json.Unmarshal(body, &st))
	require.Equal(t, "beta", st.Tenant)
	require.Equal(t, opsui.NoteMySQL, st.Note)
	require.Empty(t, st.Scopes, "a tenant sees only its own figures")
	created = 0
	for _, k := range st.Keys {
		created += k.Created
	}
	require.Equal(t, int64(3), created)
	resp, _ = s.get(t, "/v1/stats?tenant=acme", "beta-key")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotContains(t, string(body), `"tenant":"acme"`, "the query names no other tenant on the API")

	resp, _ = s.get(t, "/v1/stats", "")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestOpsStatsOnTheMemoryStore(t *testing.T) {
	t.Parallel()
	s := startServe(t, map[string]string{"IDEMGUARD_LISTEN": "127.0.0.1:0"}, "scopes: [{name: demo, operation: demo, delay: 1ms}]\n")
	resp, body := s.get(t, "/v1/stats", "dev-demo-key")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var st routers.Stats
	require.NoError(t, json.Unmarshal(body, &st))
	require.Equal(t, "memory", st.Store)
	require.Equal(t, routers.NoteNoHistory, st.Note)
	require.Empty(t, st.Scopes)
}

// opsReport is what web/browser/ops.browser.mjs saw on the page.
type opsReport struct {
	Errors []string `json:"errors"`
	Charts []struct {
		Chart  string `json:"chart"`
		Points []struct {
			Series string  `json:"series"`
			Value  float64 `json:"value"`
		} `json:"points"`
	} `json:"charts"`
	Who        string `json:"who"`
	StoredKey  bool   `json:"storedKey"`
	Screenshot string `json:"screenshot"`
}

// TestOpsPageInChromium opens /ops of the operator listener in headless Chromium (Debian's,
// driven by playwright-core from web/node_modules), names tenant acme (no credential: the
// listener is the operator's), and checks the charts drew the seeded figures. The
// screenshot goes to the test's temp directory. It needs node, `npm ci` in web/ and Chromium
// (.ci/run installs them); without them it skips, except under CI=true.
func TestOpsPageInChromium(t *testing.T) {
	t.Parallel()
	web, chromium := browsertest.Tools(t, "../../web")

	s := opsServer(t)
	out := t.TempDir()
	var rep opsReport
	browsertest.Run(t, web, chromium, &rep, "ops.browser.mjs", "--url", "http://"+s.opsAddr, "--tenant", "acme", "--out", out)
	t.Logf("screenshot: %s", rep.Screenshot)

	require.Empty(t, rep.Errors, "no script errors, no CSP violations")
	require.Contains(t, rep.Who, "keys of tenant acme")
	require.False(t, rep.StoredKey, "no credential is kept in the browser")
	require.FileExists(t, filepath.Join(out, "ops.png"))
	info, err := os.Stat(filepath.Join(out, "ops.png"))
	require.NoError(t, err)
	require.Greater(t, info.Size(), int64(10_000), "a screenshot of a drawn page, not a blank one")

	drawn := map[string]map[string][]float64{} // chart → series → values
	for _, c := range rep.Charts {
		drawn[c.Chart] = map[string][]float64{}
		for _, p := range c.Points {
			drawn[c.Chart][p.Series] = append(drawn[c.Chart][p.Series], p.Value)
		}
	}
	require.Len(t, drawn["traffic"]["requests"], 25, "a point per hour of the day, both ends included")
	for _, v := range []float64{11, 12, 13, 14} {
		require.Contains(t, drawn["traffic"]["requests"], v, "the seeded hour with %v requests is drawn", v)
	}
	require.NotContains(t, drawn["traffic"]["requests"], 999.0, "other scopes and days are not drawn")
	require.Contains(t, drawn["trouble"]["takeovers"], 1.0)
	var created float64
	for _, v := range drawn["keys"]["created"] {
		created += v
	}
	require.Equal(t, 2.0, created, "acme's own keys only")
}
