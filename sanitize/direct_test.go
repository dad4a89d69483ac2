package sanitize

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// viaMarshal is FromValueReport as it was before genericOf: encode v with
// json.Marshal, decode, sanitize.
func viaMarshal(v any) (Envelope, []string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Envelope{}, nil, err
	}
	top, err := decodeObject(b)
	if err != nil {
		return Envelope{}, nil, err
	}
	var dropped []string
	reportDropped(top, func(n string) { dropped = append(dropped, n) })
	return fromObject(top), dropped, nil
}

// checkDirect fails when FromValueReport answers v otherwise than viaMarshal.
func checkDirect(t *testing.T, v any) {
	t.Helper()
	want, wantDropped, werr := viaMarshal(v)
	var dropped []string
	got, err := FromValueReport(v, func(n string) { dropped = append(dropped, n) })
	if werr != nil {
		require.Error(t, err, "%#v", v)
		require.Equal(t, errors.Is(werr, ErrNotObject), errors.Is(err, ErrNotObject), "%#v: %v vs %v", v, werr, err)
		return
	}
	require.NoError(t, err, "%#v", v)
	require.Equal(t, want, got, "%#v", v)
	slices.Sort(dropped)
	slices.Sort(wantDropped)
	require.Equal(t, wantDropped, dropped, "%#v", v)
}

func TestGenericOfMatchesMarshal(t *testing.T) {
	t.Parallel()
	cyclic := map[string]any{}
	cyclic["data"] = cyclic
	deep := map[string]any{"ok": true}
	for range 40 {
		deep = map[string]any{"data": deep}
	}
	var nilMap map[string]any
	var nilEnv *Envelope
	for _, v := range []any{
		map[string]any{"ok": true, "stopReason": "completed", "data": map[string]any{"n": 1, "label": "x"}},
		map[string]any{"ok": false, "traceId": "<t&>", "needsHuman": true, "cached": true,
			"createdActionRequestIds": []any{1, int64(-2), json.Number("3"), "4", 5.5, nil},
			"data": map[string]any{"i": math.MinInt64, "u": uint64(math.MaxUint64), "i32": int32(-7), "n1": json.Number("1.50"),
				"n2": json.Number("1e3"), "n3": json.Number("-0"), "s": "\u2028<b>&", "b": false, "z": nil,
				"arr": []any{"a", 1, json.Number("2.0"), true, nil}, "mixed": []any{"a", map[string]any{"x": 1}},
				"obj": map[string]any{"password": "p"}, "Password": "p", "api_key": "k", "empty": []any{}, "nilarr": []any(nil)}},
		map[string]any{"data": "not an object", "stopReason": 5, "ok": "yes", "extra": map[string]any{"deep": []any{1}}},
		map[string]any{"data": map[string]any{"f": 1.5}},                  // a float: the json.Marshal path
		map[string]any{"data": map[string]any{"s": "\xff"}},               // invalid UTF-8: the json.Marshal path
		map[string]any{"data": map[string]any{"\xffkey": "v"}},            // invalid UTF-8 key
		map[string]any{"data": map[string]any{"n": json.Number("")}},      // json.Marshal writes 0
		map[string]any{"data": map[string]any{"n": json.Number("01")}},    // invalid number: an error either way
		map[string]any{"data": map[string]any{"n": json.Number("1e999")}}, // valid JSON number text
		map[string]any{},
		// Top-level members genericOf declines, each its own way through
		// json.Marshal: the direct path (fromMap) must decline them too.
		map[string]any{"ok": json.RawMessage("false"), "data": map[string]any{"n": 1}},
		map[string]any{"traceId": "tr\xff", "ok": true},
		map[string]any{"extra": math.Inf(1), "ok": true},
		map[string]any{"stopReason": struct{ A int }{1}, "needsHuman": 1.0},
		map[string]any{"\xffok": true},
		map[string]any{"ok": nilMap, "traceId": []any(nil), "cached": nilEnv, "extra": map[string]any(nil)},
		map[string]any{"extra": Envelope{TraceID: "\xff"}, "data": &Envelope{OK: true}},
		nilMap,
		[]any{map[string]any{"ok": true}},
		"{}",
		42,
		nil,
		nilEnv,
		cyclic,
		deep,
		Envelope{OK: true, StopReason: Completed, Data: map[string]any{"text": "hi", "n": json.Number("3"), "t": 7}},
		&Envelope{OK: false, StopReason: "weird", TraceID: "tr", NeedsHuman: true, Cached: true, CreatedActionRequestIDs: []int64{9, -1},
			Data: map[string]any{"nested": map[string]any{"a": 1}, "token": "secret"}},
		Envelope{StopReason: "\xff"},
		Envelope{Data: map[string]any{}},
		Envelope{Data: map[string]any{"f": 0.1}},
	} {
		checkDirect(t, v)
	}
}

// FuzzGenericOf: any JSON document, as the generic values encoding/json
// decodes, and again with its integers as int64, sanitizes the same
// directly as through json.Marshal.
func FuzzGenericOf(f *testing.F) {
	for _, c := range fieldCases {
		f.Add([]byte(c.in))
	}
	f.Add([]byte(`{"data":{"a":[1,"x",{"b":2}],"n":-0,"big":18446744073709551615}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return
		}
		checkDirect(t, v)
		checkDirect(t, withInts(v))
	})
}

// withInts replaces every json.Number that parses as an int64 by the int64.
func withInts(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = withInts(e)
		}
		return m
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = withInts(e)
		}
		return a
	}
	return v
}

// TestGenericOfKeepsStringsAndNumbersAsGiven: a string or a json.Number is
// handed back as the value it came in, not boxed again (an allocation for
// each member of an operation's data).
func TestGenericOfKeepsStringsAndNumbersAsGiven(t *testing.T) {
	for _, v := range []any{"Retries, once: the guard remembers.", json.Number("12345")} {
		if n := testing.AllocsPerRun(100, func() { genericOf(v, 0) }); n != 0 {
			t.Errorf("genericOf(%#v) allocates %v times", v, n)
		}
	}
}

// FuzzEnvelopeDirect: an Envelope, whatever its fields and its data (any
// JSON object, with its integers as json.Number or as int64), sanitizes
// the same directly (fromEnvelope) as through json.Marshal.
func FuzzEnvelopeDirect(f *testing.F) {
	f.Add(true, "completed", "", uint8(0), false, []byte(`{"text":"hi","prompt_tokens":12,"finish_reason":"stop"}`))
	f.Add(false, "", "trace-1", uint8(3), true, []byte(`{"password":"p","nested":{"a":1},"arr":[1,{"b":2}],"f":1.5}`))
	f.Add(true, "weird", "\xff", uint8(200), false, []byte(`{}`))
	f.Add(false, "timeout", strings.Repeat("t", 300), uint8(1), true, []byte(`{"s":"\u2028<>&","n":null,"tags":["a",1,null]}`))
	f.Fuzz(func(t *testing.T, ok bool, stop, trace string, nIDs uint8, cached bool, data []byte) {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var m map[string]any
		if dec.Decode(&m) != nil {
			m = nil
		}
		ids := make([]int64, nIDs)
		for i := range ids {
			ids[i] = int64(i) - 3
		}
		e := Envelope{OK: ok, StopReason: StopReason(stop), TraceID: trace, NeedsHuman: !ok, Cached: cached, CreatedActionRequestIDs: ids, Data: m}
		checkDirect(t, e)
		e.Data, _ = withInts(m).(map[string]any)
		checkDirect(t, &e)
	})
}

// FuzzIsBlockedKey: IsBlockedKey is strings.EqualFold against every
// blocked key, whatever the key's bytes.
func FuzzIsBlockedKey(f *testing.F) {
	for _, k := range []string{"prompt", "PROMPT", "\u017Ftack", "\u212Aey", "model\xff", "requestid", "", "debug "} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		want := false
		for _, b := range blockedKeys {
			want = want || strings.EqualFold(k, b)
		}
		if IsBlockedKey(k) != want {
			t.Fatalf("IsBlockedKey(%q) = %t", k, !want)
		}
	})
}
