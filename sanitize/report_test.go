package sanitize

import (
	"encoding/json"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

func reportOf(t *testing.T, v any) (Envelope, []string) {
	t.Helper()
	var names []string
	e, err := FromValueReport(v, func(n string) { names = append(names, n) })
	require.NoError(t, err)
	sort.Strings(names)
	plain, err := FromValue(v)
	require.NoError(t, err)
	require.Equal(t, plain, e, "reporting must not change the envelope")
	return e, names
}

func TestFromValueReport(t *testing.T) {
	t.Parallel()
	type summary struct {
		Title string `json:"title"`
		Words int    `json:"words"`
	}
	for name, tc := range map[string]struct {
		v    any
		want []string
	}{
		"envelope-shaped": {map[string]any{"ok": true, "stopReason": "completed", "traceId": "t", "needsHuman": false,
			"cached": true, "createdActionRequestIds": []int{1, 2}, "data": map[string]any{"a": "x", "b": []any{1, "y", nil}}}, nil},
		"struct fields are not envelope fields": {summary{Title: "t", Words: 3}, []string{"title", "words"}},
		"nested objects in data": {map[string]any{"ok": true, "data": map[string]any{
			"keep": 1, "details": map[string]any{"deep": "x"}, "rows": []any{1, map[string]any{"x": 1}}, "Prompt": "p"}},
			[]string{"data.Prompt", "data.details", "data.rows[]"}},
		"wrong types": {map[string]any{"ok": "yes", "stopReason": 1, "traceId": []int{}, "data": "x",
			"createdActionRequestIds": []any{1, "two", 1.5}}, []string{"createdActionRequestIds[]", "data", "ok", "stopReason", "traceId"}},
		"blocked top-level": {json.RawMessage(`{"ok":true,"debug":{"x":1},"model":"m","data":null}`), []string{"debug", "model"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, names := reportOf(t, tc.v)
			require.Equal(t, tc.want, names)
		})
	}
	e, err := FromValueReport("a string", func(string) { t.Fatal("nothing to report for a non-object") })
	require.ErrorIs(t, err, ErrNotObject)
	require.Zero(t, e)
}
