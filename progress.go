package idemguard

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemguard/idemguard/internal/progresshook"
	"github.com/idemguard/idemguard/store"
)

// Progress
//
// An operation reports how far it got through package progress, which
// calls the sink runOwned puts in the operation's context. A report costs
// no store write: the sink keeps the latest one (the last wins) and the
// heartbeat's next renewal carries it (store.RenewParams.Progress), so the
// statements a run makes are the same with reports as without. Only numbers
// and a stage name on the scope's allowlist (Settings.ProgressStages) are
// kept; any other stage is dropped before it is held, and counted like a
// field the sanitizer drops (EventDroppedField, field "(progress stage)"),
// never logged or sent by its value.

// droppedStageName is how a stage outside the allowlist is counted.
const droppedStageName = "(progress stage)"

// maxProgressStages bounds a scope's allowlist.
const maxProgressStages = 64

// progressSink holds an execution's latest accepted report until the
// heartbeat takes it.
type progressSink struct {
	g *Guard
	p *prepared // the heartbeat's: not copied again

	mu      sync.Mutex
	latest  store.Progress
	pending bool // latest has not been handed to a renewal
	reports bool // a report was accepted (latest is meaningful)
}

// Report makes the heartbeat the progresshook.Sink of its execution: the
// sink is made at the first report, so an operation that reports nothing
// costs nothing more.
func (hb *heartbeat) Report(done, total int64, stage string) {
	s := hb.progress.Load()
	if s == nil {
		s = &progressSink{g: hb.g, p: &hb.p}
		if !hb.progress.CompareAndSwap(nil, s) {
			s = hb.progress.Load()
		}
	}
	s.report(done, total, stage)
}

// carrying makes the heartbeat the operation's context: ctx, with the
// heartbeat as its progress sink (package progress finds it there).
func (hb *heartbeat) carrying(ctx context.Context) context.Context {
	hb.opCtx = ctx
	return (*opContext)(hb)
}

// opContext is a heartbeat seen as the operation's context.
type opContext heartbeat

func (c *opContext) Deadline() (time.Time, bool) { return c.opCtx.Deadline() }
func (c *opContext) Done() <-chan struct{}       { return c.opCtx.Done() }
func (c *opContext) Err() error                  { return c.opCtx.Err() }

func (c *opContext) Value(key any) any {
	if key == progresshook.Key {
		return (*heartbeat)(c)
	}
	return c.opCtx.Value(key)
}

// report checks a report and keeps it as the latest. It never blocks on
// I/O.
func (s *progressSink) report(done, total int64, stage string) {
	if done < 0 || total < 0 || (total > 0 && done > total) {
		return
	}
	if stage != "" && !slices.Contains(s.p.settings.ProgressStages, stage) {
		s.g.reportDroppedAs(*s.p, droppedStageName, "guard: an operation reported a progress stage that is not on its scope's "+
			"allowlist (Settings.ProgressStages); the stage was dropped, its numbers kept")
		stage = ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reports && done < s.latest.Done {
		return // monotonic within the attempt
	}
	s.latest, s.pending, s.reports = store.Progress{Done: done, Total: total, Stage: stage}, true, true
}

// take hands the latest report to a renewal: nil when none is new since the
// last renewal that carried one.
func (s *progressSink) take() *store.Progress {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.pending {
		return nil
	}
	s.pending = false
	pr := s.latest
	return &pr
}

// last is the latest report for the commit, whether or not a renewal
// carried it already (a renewal racing the commit may not land); nil for
// none.
func (s *progressSink) last() *store.Progress {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.reports {
		return nil
	}
	pr := s.latest
	return &pr
}

// untake gives a report back after a renewal whose outcome is unknown,
// unless a later one arrived meanwhile: the next renewal carries it.
func (s *progressSink) untake(pr *store.Progress) {
	if s == nil || pr == nil {
		return
	}
	s.mu.Lock()
	s.pending = true // latest is this report or a later one
	s.mu.Unlock()
}

// validateProgressStages checks a scope's allowlist of stage names.
func validateProgressStages(stages []string) error {
	if len(stages) > maxProgressStages {
		return fmt.Errorf("ProgressStages holds at most %d names, got %d", maxProgressStages, len(stages))
	}
	for _, s := range stages {
		if !validStage(s) {
			return fmt.Errorf("ProgressStages: %q must be 1–%d characters of [A-Za-z0-9._:-]", s, store.MaxProgressStage)
		}
	}
	return nil
}

func validStage(s string) bool {
	if len(s) == 0 || len(s) > store.MaxProgressStage {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}
