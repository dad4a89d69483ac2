package idemguard

import (
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"
)

// Field names the guard logs one by one, per tenant: past
// maxDroppedNamesPerTenant distinct (scope, name) pairs of one tenant,
// further names of that tenant are reported as droppedOtherName and logged
// no more, so that names built from data (map keys, an echoing upstream)
// cannot flood the log, and one tenant's names never use up another's
// share. Past maxDroppedTenants tenants, a new tenant's names go the same
// way. Metrics count dropped fields per scope only: a field name, which
// comes from an answer's content, is never a label value.
const (
	maxDroppedNamesPerTenant = 100
	maxDroppedTenants        = 1000
	maxDroppedNameLen        = 64
	droppedOtherName         = "(other)"
	droppedNameCutMark       = "…"
)

// droppedNames remembers which (scope, field name) pairs were logged, per
// tenant.
type droppedNames struct {
	mu      sync.Mutex
	tenants map[string]*droppedSet
}

type droppedSet struct {
	seen map[[2]string]struct{}
	full bool
}

// first reports whether (scope, name) is new for tenant, the name to
// report it under, and whether tenant's share just ran out.
func (d *droppedNames) first(tenant, scope, name string) (isNew bool, counted string, nowFull bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	set, ok := d.tenants[tenant]
	if !ok {
		if len(d.tenants) >= maxDroppedTenants {
			return false, droppedOtherName, false
		}
		if d.tenants == nil {
			d.tenants = make(map[string]*droppedSet)
		}
		set = &droppedSet{seen: make(map[[2]string]struct{})}
		d.tenants[tenant] = set
	}
	k := [2]string{scope, name}
	if _, ok := set.seen[k]; ok {
		return false, name, false
	}
	if len(set.seen) >= maxDroppedNamesPerTenant {
		wasFull := set.full
		set.full = true
		return false, droppedOtherName, !wasFull
	}
	set.seen[k] = struct{}{}
	return true, name, false
}

// reportDropped logs each field name the allowlist dropped from a result,
// once per (tenant, scope, name), never the value, and emits
// EventDroppedField for each every time.
func (g *Guard) reportDropped(p prepared, names []string) {
	seenHere := make(map[string]bool, len(names))
	for _, name := range names {
		name = droppedLabel(name)
		if seenHere[name] {
			continue
		}
		seenHere[name] = true
		g.reportDroppedAs(p, name, "guard: a result field is not part of the stored envelope and was dropped; "+
			"put what callers need under data (primitive values) or return a sanitize.Envelope")
	}
}

// reportDroppedAs counts one thing the guard dropped, under name: logged
// once per (tenant, scope, name) with msg, never its value, and emitted as
// EventDroppedField every time.
func (g *Guard) reportDroppedAs(p prepared, name, msg string) {
	isNew, counted, nowFull := g.dropped.first(p.tenant, p.scope, name)
	if isNew {
		g.log.Warn(msg, g.attrs(p, slog.String("field", name))...)
	}
	if nowFull {
		g.log.Warn("guard: more than 100 distinct dropped field names of one tenant; its further ones are reported as (other) and not logged",
			slog.String("tenant", p.tenant), slog.String("scope", p.scope))
	}
	g.emit(Event{Kind: EventDroppedField, Tenant: p.tenant, Scope: p.scope, Field: counted})
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
