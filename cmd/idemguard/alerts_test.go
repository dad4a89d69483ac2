package main

import (
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// docsDir is the repository's docs/, where the alert rules, their tests, the runbooks and the
// dashboard live.
var docsDir = filepath.Join("..", "..", "docs")

// runbookURLPrefix is where each alert's runbook_url points: the file docs/runbooks/<alert>.md
// of the repository.
const runbookURLPrefix = "https://github.com/idemguard/idemguard/blob/main/docs/runbooks/"

// ruleFile is the part of a Prometheus rule file these tests read.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record      string            `yaml:"record"`
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(docsDir, "alerts.yaml"))
	require.NoError(t, err)
	var f ruleFile
	require.NoError(t, yaml.Unmarshal(b, &f))
	require.NotEmpty(t, f.Groups)
	return f
}

// promtool returns the promtool to run: $PROMTOOL, else the one on PATH. Without one the test
// skips, or fails under CI=true (.ci/run installs it).
func promtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool not found (set PROMTOOL, or install it: .ci/run extracts it from Debian's prometheus package); " +
			"docs/alerts.yaml was not checked"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

func runPromtool(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool(t), args...)
	cmd.Dir = docsDir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestAlertRulesPromtool: the rules load (promtool check rules) and every unit test of
// docs/alerts_test.yaml passes (promtool test rules).
func TestAlertRulesPromtool(t *testing.T) {
	t.Parallel()
	out, err := runPromtool(t, "check", "rules", "alerts.yaml")
	require.NoError(t, err, out)
	require.Contains(t, out, "SUCCESS")
	out, err = runPromtool(t, "test", "rules", "alerts_test.yaml")
	require.NoError(t, err, out)
	require.Contains(t, out, "SUCCESS")
}

// TestPromtoolCatchesABrokenAlertTest: a test expecting an alert that does not fire fails, so a
// green run above means the expectations were checked.
func TestPromtoolCatchesABrokenAlertTest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rules, err := os.ReadFile(filepath.Join(docsDir, "alerts.yaml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "alerts.yaml"), rules, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken_test.yaml"), []byte(`rule_files: [alerts.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'idemguard_store_up{job="idemguard",instance="a:8080"}'
        values: '1x10'
    alert_rule_test:
      - eval_time: 5m
        alertname: IdemguardStoreDown
        exp_alerts:
          - exp_labels: {severity: critical, job: idemguard, instance: a:8080}
`), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool(t), "test", "rules", "broken_test.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "promtool passed a test whose alert never fires:\n%s", out)
}

// TestAlertsUseExportedMetrics: every metric an alert or recording rule reads is one idemguard
// exports (serve's /metrics, or cleanup's textfile) or a recording rule of the same file; every
// alert has a severity, a summary and a runbook_url to its own runbook, which exists; every
// runbook belongs to an alert.
func TestAlertsUseExportedMetrics(t *testing.T) {
	t.Parallel()
	exported := exportedMetrics(t)
	f := loadRules(t)
	recorded := map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	var alerts []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			what := r.Record + r.Alert
			names, err := metricNames(t, r.Expr)
			require.NoError(t, err, "%s: %s", what, r.Expr)
			require.NotEmpty(t, names, what)
			for _, n := range names {
				require.True(t, exported[n] || recorded[n], "%s reads %s, which idemguard does not export", what, n)
			}
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			require.Contains(t, []string{"critical", "warning", "ticket"}, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			require.NotEmpty(t, r.Annotations["description"], r.Alert)
			require.Equal(t, runbookURLPrefix+r.Alert+".md", r.Annotations["runbook_url"], r.Alert)
			rel, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookURLPrefix)
			require.True(t, ok)
			require.FileExists(t, filepath.Join(docsDir, "runbooks", rel))
		}
	}
	require.GreaterOrEqual(t, len(alerts), 5)

	runbooks, err := filepath.Glob(filepath.Join(docsDir, "runbooks", "*.md"))
	require.NoError(t, err)
	for _, rb := range runbooks {
		name := strings.TrimSuffix(path.Base(filepath.ToSlash(rb)), ".md")
		if name == "README" {
			continue
		}
		require.Contains(t, alerts, name, "runbook %s belongs to no alert of docs/alerts.yaml", rb)
	}
}

// TestEveryAlertHasFiringAndQuietTests: docs/alerts_test.yaml expects each alert to fire in one
// evaluation and to stay quiet in another.
func TestEveryAlertHasFiringAndQuietTests(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(docsDir, "alerts_test.yaml"))
	require.NoError(t, err)
	var tf struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	require.NoError(t, yaml.Unmarshal(b, &tf))
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tf.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	var alerts []string
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
				require.True(t, fires[r.Alert], "no test in docs/alerts_test.yaml where %s fires", r.Alert)
				require.True(t, quiet[r.Alert], "no test in docs/alerts_test.yaml where %s stays quiet", r.Alert)
			}
		}
	}
	for name := range fires {
		require.True(t, slices.Contains(alerts, name), "docs/alerts_test.yaml tests %s, which is not an alert", name)
	}
}
