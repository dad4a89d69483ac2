// Package reqlog is the HTTP API's request log line: its fields in their
// order, as slog attributes for any handler, and a JSON handler that writes
// the line itself, byte for byte what slog.NewJSONHandler(w, nil) writes for
// the same record, without building the record.
//
// The line is written once per request, so what slog's generic path costs
// (a record whose attributes spill out of its inline array, the handler's
// state, float encoding through encoding/json) was a measurable share of a
// cached replay's CPU in `idemguard serve`.
package reqlog

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemguard/idemguard/internal/jsonvalue"
)

// Msg is the message of every request line.
const Msg = "http: request"

// Line is one request's fields. The strings after Route and a false
// Replayed are left out of the line when empty.
type Line struct {
	Method, Route string
	Status        int
	// DurationMS is the request's duration in milliseconds.
	DurationMS                               float64
	Tenant, Scope, KeyHash, StopReason, Auth string
	Replayed                                 bool
}

// Attrs appends l's attributes to attrs, in the line's order: method,
// route, status, duration_ms, then tenant, scope, key_hash, stop_reason,
// auth and replayed when set. At most 10.
func (l *Line) Attrs(attrs []slog.Attr) []slog.Attr {
	attrs = append(attrs,
		slog.String("method", l.Method),
		slog.String("route", l.Route),
		slog.Int("status", l.Status),
		slog.Float64("duration_ms", l.DurationMS),
	)
	for _, f := range l.optional() {
		if f.v != "" {
			attrs = append(attrs, slog.String(f.name, f.v))
		}
	}
	if l.Replayed {
		attrs = append(attrs, slog.Bool("replayed", true))
	}
	return attrs
}

// field is one of a line's optional string fields.
type field struct{ name, v string }

// optional are l's optional string fields, in the line's order: the one
// list both encodings follow.
func (l *Line) optional() [5]field {
	return [5]field{{"tenant", l.Tenant}, {"scope", l.Scope}, {"key_hash", l.KeyHash}, {"stop_reason", l.StopReason}, {"auth", l.Auth}}
}

// Writer is a slog.Handler that writes request lines itself; a handler
// that is not one gets the line as a record with Attrs.
type Writer interface {
	slog.Handler
	// WriteRequest writes the line of l at t and level. The caller has
	// checked that the handler is enabled at level.
	WriteRequest(t time.Time, level slog.Level, l Line)
}

// JSONHandler is slog.NewJSONHandler(w, nil) (its Enabled, Handle,
// WithAttrs and WithGroup are that handler's) that also writes request
// lines directly. Every line reaches w in one Write, one at a time.
type JSONHandler struct {
	*slog.JSONHandler
	w *lockedWriter
}

// NewJSONHandler returns the handler writing to w.
func NewJSONHandler(w io.Writer) *JSONHandler {
	lw := &lockedWriter{w: w}
	return &JSONHandler{JSONHandler: slog.NewJSONHandler(lw, nil), w: lw}
}

// WriteRequest writes l as the JSON line slog's handler would write for the
// record (t, level, Msg) with l.Attrs.
func (h *JSONHandler) WriteRequest(t time.Time, level slog.Level, l Line) {
	if y := t.Year(); t.IsZero() || y < 0 || y >= 10000 || l.escapesDiffer() {
		// slog leaves a zero time out, reports a year RFC 3339 cannot
		// write, and escapes \b and \f its own way: its own path, for a
		// clock that far off or a field that odd.
		var attrs [10]slog.Attr
		r := slog.NewRecord(t, level, Msg, 0)
		r.AddAttrs(l.Attrs(attrs[:0])...)
		_ = h.Handle(context.Background(), r)
		return
	}
	bp := bufPool.Get().(*[]byte)
	b := appendJSON((*bp)[:0], t, level, &l)
	_, _ = h.w.Write(b) // as slog's handler, whose Handle error the logger drops
	if cap(b) <= maxPooledBuf {
		*bp = b
		bufPool.Put(bp)
	}
}

const maxPooledBuf = 4 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// lockedWriter serializes the handler's writes and the request lines'.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// escapesDiffer reports whether a field holds \b or \f, which slog's JSON
// handler escapes as \u0008 and \u000c where encoding/json (and
// jsonvalue.AppendString) write \b and \f.
func (l *Line) escapesDiffer() bool {
	if hasBF(l.Method) || hasBF(l.Route) {
		return true
	}
	for _, f := range l.optional() {
		if hasBF(f.v) {
			return true
		}
	}
	return false
}

// hasBF reports whether s holds \b or \f: strings.ContainsAny, without
// building its byte set on every call (the fields are short).
func hasBF(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '\b' || c == '\f' {
			return true
		}
	}
	return false
}

// appendJSON appends l's line, ending in a newline, as slog.JSONHandler
// encodes it: the time as RFC 3339 with nanoseconds, the level's name, the
// message, then the fields. t is not zero, its year has four digits, and
// no field holds \b or \f (escapesDiffer).
func appendJSON(b []byte, t time.Time, level slog.Level, l *Line) []byte {
	b = append(b, `{"time":"`...)
	b = appendTime(b, t)
	b = append(b, `","level":`...)
	b = jsonvalue.AppendString(b, level.String())
	b = append(b, `,"msg":`...)
	b = jsonvalue.AppendString(b, Msg)
	b = append(b, `,"method":`...)
	b = jsonvalue.AppendString(b, l.Method)
	b = append(b, `,"route":`...)
	b = jsonvalue.AppendString(b, l.Route)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(l.Status), 10)
	b = append(b, `,"duration_ms":`...)
	b = appendFloat(b, l.DurationMS)
	for _, f := range l.optional() {
		if f.v != "" {
			b = append(b, ',', '"')
			b = append(b, f.name...)
			b = append(b, '"', ':')
			b = jsonvalue.AppendString(b, f.v)
		}
	}
	if l.Replayed {
		b = append(b, `,"replayed":true`...)
	}
	return append(b, '}', '\n')
}

// appendFloat encodes f as encoding/json does (slog's JSON handler calls
// it for floats): %f between 1e-6 and 1e21, else %e without a leading zero
// in a negative exponent. f is finite (a duration).
func appendFloat(b []byte, f float64) []byte {
	if ms, ok := appendMillis(b, f); ok {
		return ms
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendMillis appends f as appendFloat would when f is a whole number of
// microseconds in milliseconds below 1e9 (a request's duration_ms:
// math.Round(µs)/1000), without strconv's shortest-digit search: such an f
// is the double nearest k/1000, and no other decimal of at most three
// fractional digits is within its half ulp (under 2^-24 there), so k/1000
// without trailing zeros is the shortest text that reads back as f, the
// one 'f' with precision -1 writes. It reports false for any other f.
func appendMillis(b []byte, f float64) ([]byte, bool) {
	if !(f >= 0 && f < 1e9) {
		return b, false
	}
	k := math.Round(f * 1000)
	if k/1000 != f {
		return b, false
	}
	n := int64(k)
	b = strconv.AppendInt(b, n/1000, 10)
	if frac := n % 1000; frac != 0 {
		d := [4]byte{'.', byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
		m := len(d)
		for d[m-1] == '0' {
			m--
		}
		b = append(b, d[:m]...)
	}
	return b, true
}

// secondText is the RFC 3339 text of one second in one location: the
// date and time up to the seconds, and the zone ("Z" or "+hh:mm").
type secondText struct {
	unix int64
	loc  *time.Location
	text []byte // "2006-01-02T15:04:05"
	zone []byte // "Z07:00"
}

// lastSecond is the second of the latest line: the lines of one second
// share its text, and only the fraction is formatted per line.
var lastSecond atomic.Pointer[secondText]

// appendTime appends t.AppendFormat(b, time.RFC3339Nano) for a year of
// four digits: the cached text of t's second, then the fraction (without
// trailing zeros, none when zero) and the zone. Within one location a
// second has one offset (zones change on whole seconds).
func appendTime(b []byte, t time.Time) []byte {
	st := lastSecond.Load()
	if sec := t.Unix(); st == nil || st.unix != sec || st.loc != t.Location() {
		st = &secondText{unix: sec, loc: t.Location(),
			text: t.AppendFormat(nil, "2006-01-02T15:04:05"), zone: t.AppendFormat(nil, "Z07:00")}
		lastSecond.Store(st)
	}
	b = append(b, st.text...)
	if ns := t.Nanosecond(); ns != 0 {
		var frac [10]byte
		frac[0] = '.'
		for i := 9; i > 0; i-- {
			frac[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := 10
		for frac[n-1] == '0' {
			n--
		}
		b = append(b, frac[:n]...)
	}
	return append(b, st.zone...)
}
