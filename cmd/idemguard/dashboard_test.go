package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// grafanaPanel is the part of a Grafana panel the dashboard test reads; rows nest their panels
// when collapsed.
type grafanaPanel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

// grafanaVariables are Grafana's interval macros: Grafana replaces them before it sends the
// query, so the parser gets a duration in their place.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "24h")

// labelValues matches the metric of a label_values(metric, label) variable query.
var labelValues = regexp.MustCompile(`label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)`)

// TestDashboardQueriesParseAndUseExportedMetrics: every query of docs/grafana-dashboard.json
// parses with the Prometheus parser and reads only metrics idemguard exports (a live serve's
// /metrics, and cleanup's textfile); the dashboard shows each figure an operator asks for.
func TestDashboardQueriesParseAndUseExportedMetrics(t *testing.T) {
	t.Parallel()
	exported := exportedMetrics(t)
	b, err := os.ReadFile(filepath.Join(docsDir, "grafana-dashboard.json"))
	require.NoError(t, err)
	var dash struct {
		Title      string         `json:"title"`
		UID        string         `json:"uid"`
		Panels     []grafanaPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	require.NotEmpty(t, dash.UID)

	used := map[string]bool{}
	var walk func(ps []grafanaPanel)
	queries := 0
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
			for _, tg := range p.Targets {
				queries++
				names, err := metricNames(t, grafanaVariables.Replace(tg.Expr))
				require.NoError(t, err, "panel %q: %s", p.Title, tg.Expr)
				require.NotEmpty(t, names, "panel %q reads no metric: %s", p.Title, tg.Expr)
				for _, n := range names {
					require.True(t, exported[n], "panel %q reads %s, which idemguard does not export", p.Title, n)
					used[n] = true
				}
			}
		}
	}
	walk(dash.Panels)
	require.Greater(t, queries, 10)

	for _, v := range dash.Templating.List {
		for _, m := range labelValues.FindAllStringSubmatch(string(v.Query), -1) {
			require.True(t, exported[m[1]], "variable %s reads %s, which idemguard does not export", v.Name, m[1])
		}
	}

	// What the dashboard is for: hits and misses, replays, conflicts, takeovers and abandons,
	// expirations, store latency, and what the guard saved.
	for _, want := range []string{
		"idemguard_claims_total", "idemguard_replays_total", "idemguard_in_progress_total",
		"idemguard_takeovers_total", "idemguard_abandoned_total", "idemguard_lost_claims_total",
		"idemguard_cleanup_deleted_rows", "idemguard_store_probe_duration_seconds_bucket", "idemguard_store_errors_total",
		"idemguard_avoided_calls_total", "idemguard_avoided_tokens_total", "idemguard_avoided_cost_total",
	} {
		require.True(t, used[want], "no panel shows %s", want)
	}
}
