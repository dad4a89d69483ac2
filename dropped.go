package idemguard

import (
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"
)

// Field names the guard logs and counts one by one. Past maxDroppedNames
// distinct (scope, name) pairs, further names are counted as
// droppedOtherName and logged no more, so that names built from data (map
// keys) cannot flood the log or the metric's label set.
const (
	maxDroppedNames    = 1000
	maxDroppedNameLen  = 64
	droppedOtherName   = "(other)"
	droppedNameCutMark = "…"
)

// droppedNames remembers which (scope, field name) pairs were logged.
type droppedNames struct {
	mu   sync.Mutex
	seen map[[2]string]struct{}
	full bool
}

// first reports whether (scope, name) is new, and the name to count it
// under.
func (d *droppedNames) first(scope, name string) (bool, string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := [2]string{scope, name}
	if _, ok := d.seen[k]; ok {
		return false, name, false
	}
	if len(d.seen) >= maxDroppedNames {
		wasFull := d.full
		d.full = true
		return false, droppedOtherName, !wasFull
	}
	if d.seen == nil {
		d.seen = make(map[[2]string]struct{})
	}
	d.seen[k] = struct{}{}
	return true, name, false
}

// reportDropped logs each field name the allowlist dropped from a result,
// once per (scope, name), never the value, and emits EventDroppedField for
// each every time.
func (g *Guard) reportDropped(p prepared, names []string) {
	seenHere := make(map[string]bool, len(names))
	for _, name := range names {
		name = droppedLabel(name)
		if seenHere[name] {
			continue
		}
		seenHere[name] = true
		isNew, counted, nowFull := g.dropped.first(p.scope, name)
		if isNew {
			g.log.Warn("guard: a result field is not part of the stored envelope and was dropped; "+
				"put what callers need under data (primitive values) or return a sanitize.Envelope",
				g.attrs(p, slog.String("field", name))...)
		}
		if nowFull {
			g.log.Warn("guard: more than 1000 distinct dropped field names; further ones are counted as (other) and not logged",
				slog.String("scope", p.scope))
		}
		g.emit(Event{Kind: EventDroppedField, Scope: p.scope, Field: counted})
	}
}

// droppedLabel is name as it is logged and counted: valid UTF-8 (a metric
// label must be, and a Go map key need not be), cut at a rune boundary past
// maxDroppedNameLen bytes.
func droppedLabel(name string) string {
	name = strings.ToValidUTF8(name, "\uFFFD")
	if len(name) <= maxDroppedNameLen {
		return name
	}
	cut := maxDroppedNameLen
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + droppedNameCutMark
}
