package main

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/metrics"
)

var (
	exportedOnce  sync.Once
	exportedNames map[string]bool
	exportedErr   string
)

// exportedMetrics returns the name of every sample a live `idemguard serve` (development mode,
// in-memory store, one scope) exports on /metrics before any request, histograms' _bucket, _sum
// and _count included, plus the names `idemguard cleanup --metrics-file` writes for
// node_exporter. It is read once per test binary.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	exportedOnce.Do(func() {
		names, err := scrapeServe(t)
		if err != "" {
			exportedErr = err
			return
		}
		exportedNames = names
	})
	require.Empty(t, exportedErr)
	return exportedNames
}

func scrapeServe(t *testing.T) (map[string]bool, string) {
	s := startServe(t, map[string]string{"IDEMGUARD_LISTEN": "127.0.0.1:0"}, "scopes: [{name: demo, operation: demo, delay: 1ms}]\n")
	resp, body := s.operator(t, "/metrics")
	if resp.StatusCode != http.StatusOK {
		return nil, "GET /metrics answered " + resp.Status
	}
	names := sampleNames(string(body))

	path := filepath.Join(t.TempDir(), "cleanup.prom")
	if err := metrics.WriteCleanupTextfile(path, metrics.CleanupRun{OK: true, At: time.Now()}); err != nil {
		return nil, err.Error()
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err.Error()
	}
	for n := range sampleNames(string(b)) {
		names[n] = true
	}
	return names, ""
}

// sampleNames returns the metric name of every sample line of a text exposition.
func sampleNames(text string) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// metricNames returns the metric names an expression selects, each with where it appears.
func metricNames(t *testing.T, expr string) ([]string, error) {
	t.Helper()
	e, err := parser.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			if name == "" {
				for _, m := range vs.LabelMatchers {
					if m.Name == "__name__" {
						name = m.Value
					}
				}
			}
			names = append(names, name)
		}
		return nil
	})
	return names, nil
}

func TestSampleNames(t *testing.T) {
	t.Parallel()
	got := sampleNames("# HELP a_total x\n# TYPE a_total counter\na_total{scope=\"x\"} 1\nb_bucket{le=\"+Inf\"} 2\nc 3\n\n")
	require.Equal(t, map[string]bool{"a_total": true, "b_bucket": true, "c": true}, got)
	names, err := metricNames(t, `sum by (scope) (rate(a_total{scope="x"}[5m])) / on() group_left b + {__name__="c"}`)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a_total", "b", "c"}, names)
	_, err = metricNames(t, `rate(a_total[5m]`)
	require.Error(t, err)
}
