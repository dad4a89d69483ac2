package sanitize

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

var marshalCases = []Envelope{
	{},
	{OK: true, StopReason: Completed},
	{OK: false, StopReason: "weird \"reason\"", NeedsHuman: true, Cached: true},
	{OK: true, StopReason: Completed, CreatedActionRequestIDs: []int64{1, -2, 9223372036854775807}, TraceID: "t<>&\u2028\u2029",
		Data: map[string]any{"b": "x\n\t\r\b\f\x01\x1f\"\\/", "a": json.Number("1.5e10"), "c": nil, "d": true,
			"e": []any{"s", json.Number("-0"), false, nil}, "é": "日本\xff", "": []any{}}},
	{Data: map[string]any{}},
	{CreatedActionRequestIDs: []int64{}},
	// Values a sanitized envelope never holds: encoding/json decides.
	{Data: map[string]any{"n": 1, "f": 0.5, "m": map[string]any{"x": 1}}},
	{Data: map[string]any{"bad": json.Number("01")}},
	{Data: map[string]any{"empty": json.Number("")}},
	{Data: map[string]any{"nested": []any{[]any{"x"}}}},
	{Data: map[string]any{"nil": []any(nil)}},
}

func TestMarshalMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for i, e := range marshalCases {
		want, wantErr := marshalJSON(e)
		got, err := Marshal(e)
		if wantErr != nil {
			require.Error(t, err, "case %d", i)
			continue
		}
		require.NoError(t, err, "case %d", i)
		require.Equal(t, string(want), string(got), "case %d", i)
	}
}

func TestMarshalFastPathTakesSanitizedEnvelopes(t *testing.T) {
	t.Parallel()
	e, err := FromJSON(typicalEnvelope)
	require.NoError(t, err)
	_, ok := appendEnvelope(nil, e)
	require.True(t, ok, "every sanitized envelope must take the fast path")
}

// FuzzMarshalMatchesEncodingJSON builds an envelope from arbitrary JSON (the
// sanitized one, and the raw data members as they come) and holds Marshal
// and encoding/json byte for byte.
func FuzzMarshalMatchesEncodingJSON(f *testing.F) {
	f.Add(typicalEnvelope)
	f.Add([]byte(`{"ok":false,"stopReason":"x\u2028","traceId":"\u0001","data":{"a":["\ud83d\ude00",1e400,-0.0]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := FromJSON(b)
		if err != nil {
			return
		}
		for _, env := range []Envelope{e, {StopReason: StopReason(b), TraceID: string(b), Data: map[string]any{string(b): string(b)}}} {
			want, wantErr := marshalJSON(env)
			got, err := Marshal(env)
			if wantErr != nil {
				require.Error(t, err)
				continue
			}
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		}
	})
}
