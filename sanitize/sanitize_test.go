package sanitize

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fieldCases cover every allowlisted top-level field. They also seed FuzzSanitize.
var fieldCases = []struct {
	name string
	in   string
	want Envelope
}{
	{"empty object", `{}`, Envelope{OK: true, StopReason: Completed}},
	{"ok true", `{"ok":true}`, Envelope{OK: true, StopReason: Completed}},
	{"ok false", `{"ok":false}`, Envelope{OK: false, StopReason: Unknown}},
	{"ok wrong type string", `{"ok":"yes"}`, Envelope{OK: true, StopReason: Completed}},
	{"ok wrong type number", `{"ok":0}`, Envelope{OK: true, StopReason: Completed}},
	{"ok null", `{"ok":null}`, Envelope{OK: true, StopReason: Completed}},
	{"Ok other case is not ok", `{"OK":false}`, Envelope{OK: true, StopReason: Completed}},
	{"stopReason kept", `{"ok":false,"stopReason":"needs_human"}`, Envelope{OK: false, StopReason: NeedsHuman}},
	{"stopReason unknown value", `{"stopReason":"exploded"}`, Envelope{OK: true, StopReason: Unknown}},
	{"stopReason case-sensitive", `{"stopReason":"COMPLETED"}`, Envelope{OK: true, StopReason: Unknown}},
	{"stopReason empty is missing", `{"stopReason":""}`, Envelope{OK: true, StopReason: Completed}},
	{"stopReason empty is missing, not ok", `{"ok":false,"stopReason":""}`, Envelope{OK: false, StopReason: Unknown}},
	{"stopReason wrong type", `{"ok":true,"stopReason":7}`, Envelope{OK: true, StopReason: Completed}},
	{"stopReason wrong type, not ok", `{"ok":false,"stopReason":["timeout"]}`, Envelope{OK: false, StopReason: Unknown}},
	{"needsHuman true", `{"needsHuman":true}`, Envelope{OK: true, StopReason: Completed, NeedsHuman: true}},
	{"needsHuman wrong type", `{"needsHuman":"true"}`, Envelope{OK: true, StopReason: Completed}},
	{"cached ignored", `{"cached":true}`, Envelope{OK: true, StopReason: Completed}},
	{"traceId kept", `{"traceId":"tr-1"}`, Envelope{OK: true, StopReason: Completed, TraceID: "tr-1"}},
	{"traceId wrong type", `{"traceId":12}`, Envelope{OK: true, StopReason: Completed}},
	{"traceId capped", `{"traceId":"` + strings.Repeat("a", 300) + `"}`, Envelope{OK: true, StopReason: Completed, TraceID: strings.Repeat("a", 256)}},
	{"traceId capped at rune boundary", `{"traceId":"` + strings.Repeat("a", 255) + `é"}`, Envelope{OK: true, StopReason: Completed, TraceID: strings.Repeat("a", 255)}},
	{"traceId invalid utf8 replaced", "{\"traceId\":\"a\xffb\"}", Envelope{OK: true, StopReason: Completed, TraceID: "a\uFFFDb"}},
	{"ids kept", `{"createdActionRequestIds":[1,2,3]}`, Envelope{OK: true, StopReason: Completed, CreatedActionRequestIDs: []int64{1, 2, 3}}},
	{"ids filtered", `{"createdActionRequestIds":[1,"2",3.5,null,{},[4],-5,9223372036854775807,9223372036854775808,1e2,2.0]}`,
		Envelope{OK: true, StopReason: Completed, CreatedActionRequestIDs: []int64{1, -5, 9223372036854775807, 100, 2}}},
	{"ids int64 min", `{"createdActionRequestIds":[-9223372036854775808]}`, Envelope{OK: true, StopReason: Completed, CreatedActionRequestIDs: []int64{-9223372036854775808}}},
	{"ids not array", `{"createdActionRequestIds":5}`, Envelope{OK: true, StopReason: Completed}},
	{"ids empty", `{"createdActionRequestIds":[]}`, Envelope{OK: true, StopReason: Completed}},
	{"ids none valid", `{"createdActionRequestIds":["a"]}`, Envelope{OK: true, StopReason: Completed}},
	{"unknown top-level dropped, not moved", `{"foo":1,"result":{"a":1}}`, Envelope{OK: true, StopReason: Completed}},
	{"duplicate key last wins", `{"ok":false,"ok":true}`, Envelope{OK: true, StopReason: Completed}},
	{"whitespace", " \n{ \"ok\" : false , \"stopReason\" : \"timeout\" }\t", Envelope{OK: false, StopReason: Timeout}},
	{"data primitives", `{"data":{"s":"x","t":true,"f":false,"n":null,"i":42,"x":1.5}}`,
		Envelope{OK: true, StopReason: Completed, Data: map[string]any{"s": "x", "t": true, "f": false, "n": nil, "i": json.Number("42"), "x": json.Number("1.5")}}},
	{"data nested object dropped", `{"data":{"keep":1,"obj":{"a":1},"empty":{}}}`,
		Envelope{OK: true, StopReason: Completed, Data: map[string]any{"keep": json.Number("1")}}},
	{"data array mixed elements", `{"data":{"a":[1,"two",true,null,{"x":1},[2],3.50]}}`,
		Envelope{OK: true, StopReason: Completed, Data: map[string]any{"a": []any{json.Number("1"), "two", true, nil, json.Number("3.5")}}}},
	{"data array of objects becomes empty", `{"data":{"a":[{"x":1}]}}`,
		Envelope{OK: true, StopReason: Completed, Data: map[string]any{"a": []any{}}}},
	{"data empty array", `{"data":{"a":[]}}`, Envelope{OK: true, StopReason: Completed, Data: map[string]any{"a": []any{}}}},
	{"data only nested objects is omitted", `{"data":{"o":{"a":1}}}`, Envelope{OK: true, StopReason: Completed}},
	{"data empty omitted", `{"data":{}}`, Envelope{OK: true, StopReason: Completed}},
	{"data not object: array", `{"data":[1,2]}`, Envelope{OK: true, StopReason: Completed}},
	{"data not object: string", `{"data":"x"}`, Envelope{OK: true, StopReason: Completed}},
	{"data null", `{"data":null}`, Envelope{OK: true, StopReason: Completed}},
	{"data overflowing number dropped", `{"data":{"big":1E400,"ok":1,"arr":[1e400,2]}}`,
		Envelope{OK: true, StopReason: Completed, Data: map[string]any{"ok": json.Number("1"), "arr": []any{json.Number("2")}}}},
	{"data invalid utf8 replaced", "{\"data\":{\"k\xff\":\"v\xfe\"}}",
		Envelope{OK: true, StopReason: Completed, Data: map[string]any{"k\uFFFD": "v\uFFFD"}}},
	{"data html kept", `{"data":{"h":"<a href=\"x\">&</a>"}}`,
		Envelope{OK: true, StopReason: Completed, Data: map[string]any{"h": `<a href="x">&</a>`}}},
	{"everything", `{"ok":false,"stopReason":"needs_human","createdActionRequestIds":[7],"traceId":"t","needsHuman":true,"cached":true,"data":{"msg":"hi"},"prompt":"secret"}`,
		Envelope{OK: false, StopReason: NeedsHuman, CreatedActionRequestIDs: []int64{7}, TraceID: "t", NeedsHuman: true, Data: map[string]any{"msg": "hi"}}},
}

func TestFromJSONFields(t *testing.T) {
	t.Parallel()
	for _, tc := range fieldCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := FromJSON([]byte(tc.in))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			requireIdempotent(t, []byte(tc.in))
		})
	}
}

func TestFromJSONIDsCapped(t *testing.T) {
	t.Parallel()
	ids := make([]string, 1500)
	for i := range ids {
		ids[i] = "1"
	}
	in := `{"createdActionRequestIds":["x",` + strings.Join(ids, ",") + `]}`
	got, err := FromJSON([]byte(in))
	require.NoError(t, err)
	require.Len(t, got.CreatedActionRequestIDs, MaxActionRequestIDs)
	requireIdempotent(t, []byte(in))
}

// blockedKeyVariants returns k as given, lower case, upper case, and with
// alternating case.
func blockedKeyVariants(k string) []string {
	alt := []rune(k)
	for i, r := range alt {
		if i%2 == 0 {
			alt[i] = []rune(strings.ToUpper(string(r)))[0]
		} else {
			alt[i] = []rune(strings.ToLower(string(r)))[0]
		}
	}
	return []string{k, strings.ToLower(k), strings.ToUpper(k), string(alt)}
}

func TestBlockedKeys(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, []string{"_internal", "debug", "prompt", "systemPrompt", "error", "stack", "provider", "model", "requestId"}, BlockedKeys())
	for _, key := range BlockedKeys() {
		for _, variant := range blockedKeyVariants(key) {
			for _, place := range []struct {
				name string
				in   string
			}{
				{"top level", `{"` + variant + `":"v","ok":true}`},
				{"top level object", `{"` + variant + `":{"a":1}}`},
				{"in data", `{"data":{"` + variant + `":"v","keep":1}}`},
				{"in data, array", `{"data":{"` + variant + `":["v"],"keep":1}}`},
				{"in data, number", `{"data":{"` + variant + `":1,"keep":1}}`},
				{"in data, nested", `{"data":{"keep":1,"o":{"` + variant + `":"v"}}}`},
				{"in data, array of objects", `{"data":{"keep":1,"a":[{"` + variant + `":"v"}]}}`},
			} {
				t.Run(variant+"/"+place.name, func(t *testing.T) {
					t.Parallel()
					require.True(t, IsBlockedKey(variant))
					e, err := FromJSON([]byte(place.in))
					require.NoError(t, err)
					b, err := Policy{}.Encode(e)
					require.NoError(t, err)
					require.Empty(t, blockedKeysIn(t, b), "output %s", b)
					require.NotContains(t, strings.ToLower(string(b)), strings.ToLower(key))
					if strings.Contains(place.in, "keep") {
						require.Equal(t, json.Number("1"), e.Data["keep"])
					}
					requireIdempotent(t, []byte(place.in))
				})
			}
		}
	}
}

func TestIsBlockedKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"prompt", true},
		{"PROMPT", true},
		{"systemprompt", true},
		{"SystemPrompt", true},
		{"REQUESTID", true},
		{"_Internal", true},
		{"\u212Aey", false},  // Kelvin sign folds to k, but "key" is not blocked
		{"\u017Ftack", true}, // long s folds to s: "ſtack" is "stack"
		{"prompts", false},
		{"system_prompt", false},
		{"request_id", false},
		{"", false},
		{"internal", false},
		{"msg", false},
	} {
		t.Run(tc.key, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, IsBlockedKey(tc.key))
		})
	}
}

func TestParseStopReason(t *testing.T) {
	t.Parallel()
	for _, r := range StopReasons() {
		require.Equal(t, r, ParseStopReason(string(r)))
		require.True(t, r.Valid())
		require.Equal(t, string(r), r.String())
	}
	require.Len(t, StopReasons(), 11)
	for _, s := range []string{"", "Completed", "COMPLETED", " completed", "completed ", "done", "in-progress", "null"} {
		require.Equal(t, Unknown, ParseStopReason(s), "%q", s)
		require.False(t, StopReason(s).Valid(), "%q", s)
	}
}

// numberCases are canonicalization cases; want "" means the value is dropped.
var numberCases = []struct{ in, want string }{
	{"0", "0"},
	{"-0", "0"},
	{"1", "1"},
	{"-17", "-17"},
	{"1.50", "1.5"},
	{"1.0", "1"},
	{"-0.0", "0"},
	{"0.1", "0.1"},
	{"1e2", "100"},
	{"1E2", "100"},
	{"1e+2", "100"},
	{"1.5e3", "1500"},
	{"1e-7", "1e-07"},
	{"123.456e-2", "1.23456"},
	{"1234567.0", "1234567"},
	{"9223372036854775807", "9223372036854775807"},
	{"-9223372036854775808", "-9223372036854775808"},
	{"9223372036854775808", "9.223372036854776e+18"},
	{"12345678901234567890", "1.2345678901234567e+19"},
	{"-12345678901234567890", "-1.2345678901234567e+19"},
	{"9007199254740993.0", "9007199254740992"},
	{"1e21", "1e+21"},
	{"1e+21", "1e+21"},
	{"1.7976931348623157e308", "1.7976931348623157e+308"},
	{"5e-324", "5e-324"},
	{"1e-400", "0"},
	{"-1e-400", "0"},
	{"1E400", ""},
	{"-1E400", ""},
	{"1e99999999999999999999", ""},
}

func TestCanonicalNumber(t *testing.T) {
	t.Parallel()
	for _, tc := range numberCases {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			got, ok := CanonicalNumber(tc.in)
			if tc.want == "" {
				require.False(t, ok)
				return
			}
			require.True(t, ok)
			require.Equal(t, json.Number(tc.want), got)
			again, ok := CanonicalNumber(string(got))
			require.True(t, ok)
			require.Equal(t, got, again, "not idempotent")
			require.True(t, json.Valid([]byte(got)))

			// The same through FromJSON, in data and in an array.
			in := `{"data":{"n":` + tc.in + `,"a":[` + tc.in + `]}}`
			e, err := FromJSON([]byte(in))
			require.NoError(t, err)
			require.Equal(t, json.Number(tc.want), e.Data["n"])
			require.Equal(t, []any{json.Number(tc.want)}, e.Data["a"])
			requireIdempotent(t, []byte(in))
		})
	}
}

func TestFromJSONErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		in        string
		notObject bool
	}{
		{"empty input", ``, false},
		{"space", `   `, false},
		{"truncated", `{"ok":`, false},
		{"trailing garbage", `{"ok":true}x`, false},
		{"two objects", `{}{}`, false},
		{"two objects spaced", `{} {}`, false},
		{"single quotes", `{'ok':true}`, false},
		{"trailing comma", `{"ok":true,}`, false},
		{"NaN", `{"data":{"n":NaN}}`, false},
		{"array", `[{"ok":true}]`, true},
		{"string", `"ok"`, true},
		{"number", `1`, true},
		{"null", `null`, true},
		{"true", `true`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := FromJSON([]byte(tc.in))
			require.Error(t, err)
			if tc.notObject {
				require.ErrorIs(t, err, ErrNotObject)
			} else {
				require.NotErrorIs(t, err, ErrNotObject)
			}
		})
	}
}

func TestFromValue(t *testing.T) {
	t.Parallel()
	want := Envelope{OK: false, StopReason: NeedsHuman, TraceID: "t", NeedsHuman: true, Data: map[string]any{"n": json.Number("1.5"), "s": "x"}}
	type result struct {
		OK         bool           `json:"ok"`
		StopReason string         `json:"stopReason"`
		TraceID    string         `json:"traceId"`
		NeedsHuman bool           `json:"needsHuman"`
		Model      string         `json:"model"`
		Data       map[string]any `json:"data"`
	}
	raw := `{"ok":false,"stopReason":"needs_human","traceId":"t","needsHuman":true,"data":{"n":1.50,"s":"x","prompt":"p"}}`
	hand := Envelope{OK: false, StopReason: NeedsHuman, TraceID: "t", NeedsHuman: true, Cached: true,
		Data: map[string]any{"n": 1.5, "s": "x", "Prompt": "p", "nested": map[string]any{"a": 1}}}
	for _, tc := range []struct {
		name string
		v    any
	}{
		{"Envelope", hand},
		{"*Envelope", &hand},
		{"map", map[string]any{"ok": false, "stopReason": "needs_human", "traceId": "t", "needsHuman": true, "model": "m", "data": map[string]any{"n": 1.5, "s": "x", "debug": true}}},
		{"struct", result{OK: false, StopReason: "needs_human", TraceID: "t", NeedsHuman: true, Model: "gpt", Data: map[string]any{"n": 1.5, "s": "x"}}},
		{"json.RawMessage", json.RawMessage(raw)},
		{"[]byte", []byte(raw)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := FromValue(tc.v)
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}

	_, err := FromValue(make(chan int))
	require.Error(t, err)
	_, err = FromValue(nil)
	require.ErrorIs(t, err, ErrNotObject)
	_, err = FromValue("{}") // a Go string is a JSON string, not JSON text
	require.ErrorIs(t, err, ErrNotObject)
}

// TestFromValueEnvelopeAsEncodingJSON: an Envelope is encoded by Marshal, not
// json.Marshal; what FromValue makes of it is what it made before.
func TestFromValueEnvelopeAsEncodingJSON(t *testing.T) {
	t.Parallel()
	var nilEnv *Envelope
	for _, v := range []any{
		Envelope{OK: true, StopReason: "completed", TraceID: "<a&b>", CreatedActionRequestIDs: []int64{1, -2},
			Data: map[string]any{"html": "<script>&</script>", "bad": "\xff\u2028", "n": json.Number("1e3"), "f": 0.1,
				"i": 7, "nil": nil, "arr": []any{"x", 1}, "obj": map[string]any{"a": 1}, "password": "p", "raw": json.RawMessage(`{"x":[1]}`)}},
		&Envelope{OK: false, StopReason: "weird", NeedsHuman: true, Cached: true},
		Envelope{},
		nilEnv,
	} {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		want, werr := FromJSON(b)
		got, gerr := FromValue(v)
		require.Equal(t, werr, gerr, "%#v", v)
		require.Equal(t, want, got, "%#v", v)
	}
}

func TestMarshalGolden(t *testing.T) {
	t.Parallel()
	e := Envelope{OK: true, StopReason: Completed, CreatedActionRequestIDs: []int64{3, 1}, TraceID: "t<1>", NeedsHuman: false, Cached: true,
		Data: map[string]any{"z": "<&>", "a": []any{json.Number("1"), nil}, "m": json.Number("-2.5")}}
	b, err := Marshal(e)
	require.NoError(t, err)
	require.Equal(t, `{"ok":true,"stopReason":"completed","createdActionRequestIds":[3,1],"traceId":"t<1>","needsHuman":false,"cached":true,"data":{"a":[1,null],"m":-2.5,"z":"<&>"}}`, string(b))

	b, err = Marshal(Failure(Timeout))
	require.NoError(t, err)
	require.Equal(t, `{"ok":false,"stopReason":"timeout","needsHuman":false,"cached":false}`, string(b))

	stored, err := Policy{}.Encode(e)
	require.NoError(t, err)
	require.Equal(t, `{"ok":true,"stopReason":"completed","createdActionRequestIds":[3,1],"traceId":"t<1>","needsHuman":false,"cached":false,"data":{"a":[1,null],"m":-2.5,"z":"<&>"}}`, string(stored))
}

func TestFailure(t *testing.T) {
	t.Parallel()
	require.Equal(t, Envelope{OK: false, StopReason: ProviderError}, Failure(ProviderError))
	require.Equal(t, Envelope{OK: false, StopReason: Unknown}, Failure("boom"))
	for _, r := range StopReasons() {
		got, err := FromValue(Failure(r))
		require.NoError(t, err)
		require.Equal(t, Failure(r), got)
	}
}

func TestEncodeSanitizesHandBuiltEnvelope(t *testing.T) {
	t.Parallel()
	e := Envelope{OK: true, StopReason: "weird", TraceID: strings.Repeat("x", 400), Cached: true,
		Data: map[string]any{"Error": "boom", "stack": "trace", "n": 1.50, "o": map[string]any{"a": 1}, "a": []any{1, map[string]any{}}}}
	b, err := Policy{}.Encode(e)
	require.NoError(t, err)
	require.Equal(t, `{"ok":true,"stopReason":"unknown","traceId":"`+strings.Repeat("x", 256)+`","needsHuman":false,"cached":false,"data":{"a":[1],"n":1.5}}`, string(b))
}

// requireIdempotent checks that sanitizing the stored bytes again yields the
// same envelope and the same bytes.
func requireIdempotent(t *testing.T, in []byte) {
	t.Helper()
	e1, err := FromJSON(in)
	require.NoError(t, err)
	b1, err := Marshal(e1)
	require.NoError(t, err)
	e2, err := FromJSON(b1)
	require.NoError(t, err)
	require.Equal(t, e1, e2)
	b2, err := Marshal(e2)
	require.NoError(t, err)
	require.Equal(t, string(b1), string(b2))
}

// blockedKeysIn decodes b generically and returns every object key, at any
// depth, that is a blocked key.
func blockedKeysIn(t testing.TB, b []byte) []string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(b, &v))
	var found []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, el := range x {
				for _, bk := range blockedKeys {
					if strings.EqualFold(k, bk) || strings.ToLower(k) == strings.ToLower(bk) {
						found = append(found, k)
					}
				}
				walk(el)
			}
		case []any:
			for _, el := range x {
				walk(el)
			}
		}
	}
	walk(v)
	return found
}
