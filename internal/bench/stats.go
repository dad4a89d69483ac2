package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// round is one measured run of one case: how many operations finished, how
// long the run took (first start to last finish), the CPU time this process
// used meanwhile (0 where not measured) and every latency.
type round struct {
	ops       int
	elapsed   time.Duration
	cpu       time.Duration
	latencies []time.Duration
}

// cpuPerOp is the process CPU time per operation over all rounds: the
// client-side cost of a case, which machine load inflates far less than
// wall-clock throughput. 0 when not measured.
func cpuPerOp(rounds []round) time.Duration {
	var cpu time.Duration
	ops := 0
	for _, r := range rounds {
		cpu += r.cpu
		ops += r.ops
	}
	if ops == 0 || cpu <= 0 {
		return 0
	}
	return cpu / time.Duration(ops)
}

func (r round) opsPerSec() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, which must be sorted ascending: the smallest value such that at
// least p% of the values are at or below it. It returns 0 for an empty slice.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// medianRound returns the round with the median throughput (of an even
// number, the lower middle one: the conservative choice) and the spread of
// throughput across rounds, (max-min)/median. rounds must not be empty.
func medianRound(rounds []round) (round, float64) {
	sorted := slices.Clone(rounds)
	slices.SortStableFunc(sorted, func(a, b round) int { return cmp.Compare(a.opsPerSec(), b.opsPerSec()) })
	med := sorted[(len(sorted)-1)/2]
	spread := 0.0
	if m := med.opsPerSec(); m > 0 {
		spread = (sorted[len(sorted)-1].opsPerSec() - sorted[0].opsPerSec()) / m
	}
	return med, spread
}

// pairedRatio is the median over rounds of rounds[r]'s throughput divided by
// baseline[r]'s: rounds r of two cases ran next to each other, so a change
// of machine load between rounds cancels out. 0 when there is nothing to pair.
func pairedRatio(rounds, baseline []round) float64 {
	var ratios []float64
	for r := range min(len(rounds), len(baseline)) {
		if b := baseline[r].opsPerSec(); b > 0 {
			ratios = append(ratios, rounds[r].opsPerSec()/b)
		}
	}
	if len(ratios) == 0 {
		return 0
	}
	slices.Sort(ratios)
	if n := len(ratios); n%2 == 0 {
		return (ratios[n/2-1] + ratios[n/2]) / 2
	}
	return ratios[len(ratios)/2]
}

// summarize turns the rounds of one case into its row.
func summarize(suite string, c benchCase, concurrency int, rounds []round) row {
	med, spread := medianRound(rounds)
	lat := slices.Clone(med.latencies)
	slices.Sort(lat)
	return row{
		Suite: suite, Case: c.name, Concurrency: concurrency,
		Ops: med.ops, OpsPerSec: med.opsPerSec(),
		P50: percentile(lat, 50), P99: percentile(lat, 99),
		Spread: spread, CPUPerOp: cpuPerOp(rounds), Baseline: c.baseline, Target: c.target(concurrency),
	}
}

// ratio is a row's throughput divided by its baseline's (same suite, same
// concurrency). ok is false when the row has no baseline or it is missing.
func ratio(rows []row, r row) (float64, bool) {
	if r.Baseline == "" {
		return 0, false
	}
	for _, b := range rows {
		if b.Suite == r.Suite && b.Concurrency == r.Concurrency && b.Case == r.Baseline && b.OpsPerSec > 0 {
			return r.OpsPerSec / b.OpsPerSec, true
		}
	}
	return 0, false
}

// writeTable prints the rows, then one line per row that has a target.
// It reports whether every target was met.
func writeTable(w io.Writer, rows []row) bool {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "suite\tcase\tconc\tops/s\tp50\tp99\tspread\tcpu/op\tratio\tpaired\tvs\t")
	for _, r := range rows {
		rat, paired, vs := "", "", ""
		if x, ok := ratio(rows, r); ok {
			rat, vs = strconv.FormatFloat(x, 'f', 2, 64), r.Baseline
		}
		if r.Paired > 0 {
			paired = strconv.FormatFloat(r.Paired, 'f', 2, 64)
		}
		cpu := ""
		if r.CPUPerOp > 0 {
			cpu = formatLatency(r.CPUPerOp)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Suite, r.Case, r.Concurrency,
			formatRate(r.OpsPerSec), formatLatency(r.P50), formatLatency(r.P99),
			strconv.Itoa(int(math.Round(r.Spread*100)))+"%", cpu, rat, paired, vs)
	}
	_ = tw.Flush()

	notes := false
	for _, r := range rows {
		if r.Note == "" {
			continue
		}
		if !notes {
			fmt.Fprintln(w, "\nnotes:")
			notes = true
		}
		fmt.Fprintf(w, "  %-6s %-20s c=%-3d %s\n", r.Suite, r.Case, r.Concurrency, r.Note)
	}

	allMet, header := true, false
	for _, r := range rows {
		if r.Target <= 0 {
			continue
		}
		if !header {
			fmt.Fprintln(w, "\ntargets (throughput ratio guard/raw):")
			header = true
		}
		x, ok := ratio(rows, r)
		verdict := "ok"
		if !ok || x < r.Target {
			verdict, allMet = "MISS", false
		}
		fmt.Fprintf(w, "  %-6s %-20s c=%-3d vs %s = %s (target >= %.2f) %s; paired %s\n", r.Suite, r.Case, r.Concurrency,
			r.Baseline, strconv.FormatFloat(x, 'f', 2, 64), r.Target, verdict, strconv.FormatFloat(r.Paired, 'f', 2, 64))
	}
	return allMet
}

// formatRate prints ops/s with no decimals above 100 and one below.
func formatRate(x float64) string {
	if x >= 100 {
		return strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strconv.FormatFloat(x, 'f', 1, 64)
}

// formatLatency prints d with three significant digits in µs or ms.
func formatLatency(d time.Duration) string {
	us := float64(d) / float64(time.Microsecond)
	switch {
	case us < 1000:
		return trimFloat(us, 3) + "µs"
	default:
		return trimFloat(us/1000, 3) + "ms"
	}
}

// trimFloat formats x with sig significant digits (at least), no exponent.
func trimFloat(x float64, sig int) string {
	if x == 0 {
		return "0"
	}
	digits := int(math.Floor(math.Log10(math.Abs(x)))) + 1
	decimals := max(sig-digits, 0)
	s := strconv.FormatFloat(x, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
