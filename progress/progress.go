// Package progress lets a guarded operation say how far it got, for the
// callers watching its key (a progress bar, a stage name):
//
//	for i, doc := range docs {
//		progress.Report(ctx, progress.Update{Done: int64(i), Total: int64(len(docs)), Stage: "reading"})
//		...
//	}
//
// A report costs no store write of its own: the guard keeps the latest one
// (the last wins) and writes it with the execution's next heartbeat, in the
// renewal statement it makes anyway; every replica then reports it to the
// key's watchers as a progress event and in the key's record. Reports are
// therefore as fine-grained as the heartbeat (a third of the scope's
// StaleAfter); report as often as is convenient.
//
// Only customer-safe primitives are kept: numbers, and a stage name that is
// on the scope's allowlist (idemguard.Settings.ProgressStages). A stage
// outside it is dropped, never stored, logged or sent, and counted like a
// field the sanitizer drops; never put model output or user text in it.
// Progress is monotonic within an attempt: a report whose Done is below an
// earlier one's is ignored. A takeover or retry starts again from zero.
//
// Outside a guarded operation (no guard in ctx) Report does nothing.
package progress

import (
	"context"
	"math"

	"github.com/idemguard/idemguard/internal/progresshook"
)

// Update is one report: Done of Total steps (Total 0: the total is not
// known, e.g. tokens received so far), and the stage the operation is in, a
// name from its scope's allowlist ("" for none).
type Update struct {
	Done, Total int64
	Stage       string
}

// FractionSteps is the Total of an Update made by Fraction.
const FractionSteps = 1000

// Fraction is the update for a fraction f of the work done (0 to 1),
// counted in thousandths: Done of FractionSteps.
func Fraction(f float64, stage string) Update {
	if math.IsNaN(f) {
		f = 0
	}
	return Update{Done: int64(math.Round(min(max(f, 0), 1) * FractionSteps)), Total: FractionSteps, Stage: stage}
}

// Report tells the guard running the operation of ctx how far it got. It
// never blocks and never fails the operation: an update that is not valid
// (negative numbers, Done over a known Total, Done below an earlier
// report's) is ignored.
func Report(ctx context.Context, u Update) {
	if s := progresshook.From(ctx); s != nil {
		s.Report(u.Done, u.Total, u.Stage)
	}
}
