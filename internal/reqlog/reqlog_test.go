package reqlog

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// slogLine is what slog.NewJSONHandler(w, nil) writes for the record of l.
func slogLine(t testing.TB, at time.Time, level slog.Level, l Line) string {
	t.Helper()
	var buf bytes.Buffer
	r := slog.NewRecord(at, level, Msg, 0)
	r.AddAttrs(l.Attrs(nil)...)
	require.NoError(t, slog.NewJSONHandler(&buf, nil).Handle(context.Background(), r))
	return buf.String()
}

// ownLine is what JSONHandler.WriteRequest writes for l.
func ownLine(at time.Time, level slog.Level, l Line) string {
	var buf bytes.Buffer
	NewJSONHandler(&buf).WriteRequest(at, level, l)
	return buf.String()
}

// The request line is byte for byte slog's JSON handler's, whatever the
// values: escapes, floats, levels, time zones, fields left out.
func TestWriteRequestIsSlogsJSONLine(t *testing.T) {
	t.Parallel()
	full := Line{Method: "POST", Route: "/v1/ops/:scope", Status: 200, DurationMS: 0.123, Tenant: "acme", Scope: "chat",
		KeyHash: "0123abcd", StopReason: "completed", Auth: "key", Replayed: true}
	paris := time.FixedZone("CET", 3600)
	times := []time.Time{
		time.Date(2026, 11, 27, 23, 50, 1, 123456789, time.UTC),
		time.Date(2026, 11, 27, 23, 50, 1, 0, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 600, paris),
		time.Now(),
		{}, // slog leaves the time out
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), // slog reports the year
	}
	lines := []Line{
		full,
		{Method: "GET", Route: "unmatched", Status: 404},
		{Method: "GET", Route: "/healthz", Status: 200, DurationMS: 0},
		{Method: `P"O\ST`, Route: "a\nb\rc\td\x00\x1f\x7f", Status: 500, Tenant: "<&>é\u2028\u2029\b\f", Scope: "\xff\xfe", KeyHash: "日本",
			StopReason: "a\u00a0b", Auth: `\u0041`},
		{Method: "GET\f", Route: "/x", Status: 200}, // slog's \u000c, not encoding/json's \f
		{Method: "GET", Route: "/x", Status: 200, Auth: "a\bb"},
	}
	for _, d := range []float64{0, 0.001, 1, 12.345, 1234567.891, 1e-7, 2.5e-7, 1e21, 1.5e22, 1e20, -0.5, math.SmallestNonzeroFloat64} {
		l := full
		l.DurationMS = d
		lines = append(lines, l)
	}
	for _, at := range times {
		for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError, slog.LevelInfo + 2, slog.LevelError + 5} {
			for _, l := range lines {
				require.Equal(t, slogLine(t, at, level, l), ownLine(at, level, l))
			}
		}
	}
}

func FuzzWriteRequestIsSlogsJSONLine(f *testing.F) {
	f.Add("POST", "/v1/ops/:scope", 200, 0.5, "acme", "chat", "abcd", "completed", "key", true, int64(1764287401123456789))
	f.Add("\x00\"", "\xff", -1, 1e-9, "\u2028", "", "é", "", "", false, int64(0))
	f.Add("GET", "/\b", 200, 1.0, "", "\f", "", "", "", false, int64(1))
	f.Fuzz(func(t *testing.T, method, route string, status int, d float64, tenant, scope, keyHash, stop, authm string, replayed bool, ns int64) {
		if math.IsNaN(d) || math.IsInf(d, 0) {
			t.Skip("a duration is finite")
		}
		l := Line{Method: method, Route: route, Status: status, DurationMS: d, Tenant: tenant, Scope: scope, KeyHash: keyHash,
			StopReason: stop, Auth: authm, Replayed: replayed}
		at := time.Unix(0, ns).UTC()
		require.Equal(t, slogLine(t, at, slog.LevelInfo, l), ownLine(at, slog.LevelInfo, l))
	})
}

// appendTime is time.RFC3339Nano's text, second after second and zone
// after zone (its cache holds one second of one location).
func TestAppendTimeIsRFC3339Nano(t *testing.T) {
	t.Parallel()
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("CET", 3600), time.FixedZone("odd", -(3*3600 + 30*60 + 15))}
	if ny, err := time.LoadLocation("America/New_York"); err == nil {
		zones = append(zones, ny)
	}
	base := time.Date(2026, 3, 8, 6, 59, 58, 0, time.UTC) // a DST change in New York at 07:00 UTC
	for _, ns := range []int64{0, 1, 10, 999_999_999, 1_000_000_000, 120_000_000, 123_456_789, 1_000_000_001, 3_600e9, 7_250_000_000_000} {
		for _, loc := range zones {
			for _, at := range []time.Time{base.Add(time.Duration(ns)).In(loc), time.Date(0, 1, 1, 0, 0, 0, int(ns%1e9), loc),
				time.Date(9999, 12, 31, 23, 59, 59, int(ns%1e9), loc)} {
				require.Equal(t, at.Format(time.RFC3339Nano), string(appendTime(nil, at)), "%v", at)
			}
		}
	}
}

// The handler is slog's JSON handler for every other record, and its
// writes and the request lines reach the writer whole.
func TestJSONHandlerIsSlogsForOtherRecords(t *testing.T) {
	t.Parallel()
	var own, plain bytes.Buffer
	at := time.Date(2026, 11, 27, 23, 50, 1, 5, time.UTC)
	for _, h := range []slog.Handler{NewJSONHandler(&own), slog.NewJSONHandler(&plain, nil)} {
		r := slog.NewRecord(at, slog.LevelWarn, "serve: something", 0)
		r.AddAttrs(slog.String("k", "v"), slog.Any("err", context.Canceled))
		require.NoError(t, h.Handle(context.Background(), r))
		require.NoError(t, h.WithAttrs([]slog.Attr{slog.Int("n", 1)}).WithGroup("g").Handle(context.Background(), r))
		require.False(t, h.Enabled(context.Background(), slog.LevelDebug))
	}
	require.Equal(t, plain.String(), own.String())
}

// Benchmarks of the two ways to write the line, to the writer serve's lines
// go through (here io.Discard).
func BenchmarkRequestLine(b *testing.B) {
	l := Line{Method: "POST", Route: "/v1/ops/:scope", Status: 200, DurationMS: 0.123, Tenant: "acme", Scope: "chat",
		KeyHash: "0123abcd", StopReason: "completed", Auth: "key", Replayed: true}
	b.Run("slog", func(b *testing.B) {
		h := slog.NewJSONHandler(discard{}, nil)
		b.ReportAllocs()
		for b.Loop() {
			var attrs [10]slog.Attr
			r := slog.NewRecord(time.Now(), slog.LevelInfo, Msg, 0)
			r.AddAttrs(l.Attrs(attrs[:0])...)
			_ = h.Handle(context.Background(), r)
		}
	})
	b.Run("reqlog", func(b *testing.B) {
		h := NewJSONHandler(discard{})
		b.ReportAllocs()
		for b.Loop() {
			h.WriteRequest(time.Now(), slog.LevelInfo, l)
		}
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// A duration of whole microseconds in milliseconds takes appendMillis,
// which must write what strconv (encoding/json's and slog's %f) writes:
// every value to 1 s, then a sweep up to the bound; the values it leaves
// to strconv are written as encoding/json writes them.
func TestAppendFloatMillisIsStrconvs(t *testing.T) {
	check := func(f float64, fast bool) {
		t.Helper()
		want := strconv.AppendFloat(nil, f, 'f', -1, 64)
		if !fast {
			var err error
			want, err = json.Marshal(f)
			require.NoError(t, err)
		}
		if got := appendFloat(nil, f); string(got) != string(want) {
			t.Fatalf("appendFloat(%v) = %s, want %s", f, got, want)
		}
		if _, ok := appendMillis(nil, f); ok != fast {
			t.Fatalf("appendMillis(%v) took %t, want %t", f, ok, fast)
		}
	}
	for k := int64(0); k < 1_000_000; k++ {
		check(float64(k)/1000, true)
	}
	for k := int64(1_000_000); k < 1e12; k = k*1013/1000 + 7 {
		check(float64(k)/1000, true)
	}
	check(math.Round(float64((1234567*time.Microsecond).Microseconds()))/1000, true)
	for _, f := range []float64{0.0005, 1e-7, 0.1234, 1e9, 1e9 + 0.5, 2.5e15, 1e22, -1, -0.001, math.Nextafter(0.123, 1)} {
		check(f, false)
	}
}
