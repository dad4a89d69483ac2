package eventdata

import (
	"testing"

	"github.com/idemguard/idemguard/internal/testhooks"
)

// What happens to each kind of event data: JSON documents are cleaned one
// by one, text is kept, and text in which a JSON reader could still find a
// blocked field is refused.
func TestEventDataBlocklist(t *testing.T) {
	for _, tc := range []struct {
		data, want string
		refused    bool
	}{
		{data: `{"delta":"x"}`, want: `{"delta":"x"}`},
		{data: "{\"prompt\":\"c\"}\n{\"delta\":\"x\"}", want: "{}\n{\"delta\":\"x\"}"},
		{data: `{"a":1} {"b":{"Debug":1}}`, want: "{\"a\":1}\n{\"b\":{}}"},
		{data: "[DONE]", want: "[DONE]"},
		{data: "if (err) { return error }", want: "if (err) { return error }"},
		{data: "note\n{\"\\u0070rompt\":1}", want: "note\n{}"},
		{data: `see {"prompt": 1} here`, refused: true},
		{data: "text {\"x\":1,\n\"model\"\n: 2}", refused: true},
	} {
		got, _, refused := Clean([]byte(tc.data), "")
		if refused != tc.refused || !tc.refused && string(got) != tc.want {
			t.Errorf("%q: got %q (refused %t), want %q (refused %t)", tc.data, got, refused, tc.want, tc.refused)
		}
	}
}

// The test knob puts back the old reading: data of several JSON documents
// is kept as written, blocked members and all; one document is still
// cleaned.
func TestDefectKeepsSeveralDocuments(t *testing.T) {
	d := testhooks.DefectBlocklistMultiDocument
	two := "{\"prompt\":\"c\"}\n{\"delta\":\"x\"}"
	got, dropped, refused := Clean([]byte(two), d)
	if string(got) != two || len(dropped) > 0 || refused {
		t.Errorf("with the defect, %q became %q (dropped %q, refused %t), want it kept", two, got, dropped, refused)
	}
	if got, _, _ := Clean([]byte(`{"prompt":"c","delta":"x"}`), d); string(got) != `{"delta":"x"}` {
		t.Errorf("with the defect, one document became %q, want it cleaned", got)
	}
	e, dropped, _, ok := Parse([]byte("event: m\ndata: {\"delta\":\"x\"}\ndata: {\"Debug\":1}"), "")
	if !ok || e.Type != "m" || string(e.Data) != "{\"delta\":\"x\"}\n{}" || len(dropped) != 1 {
		t.Errorf("without it, got %q %q (dropped %q)", e.Type, e.Data, dropped)
	}
}
