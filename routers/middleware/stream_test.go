package middleware

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/idemguard/idemguard/internal/eventdata"
	"github.com/idemguard/idemguard/internal/live"
	"github.com/idemguard/idemguard/sanitize"
)

// FuzzEventBlocklist: whatever event block a handler writes, the event the
// middleware keeps (if it keeps one) holds no blocked member in any JSON
// document a client could read from its data: the data as a sequence of
// documents, each line as one, or the value that starts at any object
// brace. Rendered and read again, the kept event is unchanged and nothing
// more is dropped.
func FuzzEventBlocklist(f *testing.F) {
	for _, seed := range []string{
		"data: {\"prompt\":\"CANARY\"}\ndata: {\"delta\":\"x\"}",
		"data: {\"a\":1} {\"b\":{\"Debug\":\"CANARY\"}}",
		"data: note\ndata: {\"\\u0070rompt\":\"CANARY\"}",
		"data: hello {\"prompt\":1}",
		"data: [{\"x\":[{\"MODEL\":2}]}]\nevent: usage",
		"data: [DONE]",
		"data: {\ndata: \"prompt\": 1\ndata: }",
		"data: text\ndata: {\ndata: \"stack\": 1}",
		"data: \"just a string\"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, block []byte) {
		e, _, refused, ok := eventdata.Parse(block, "")
		if !ok || refused {
			return
		}
		if name := blockedMemberIn(e.Data); name != "" {
			t.Fatalf("kept data %q holds the blocked member %q", e.Data, name)
		}
		wire := live.AppendSSE(nil, live.Event{Type: e.Type, Data: e.Data})
		again, dropped, refused, ok := eventdata.Parse(bytes.TrimSuffix(wire, []byte("\n\n")), "")
		if !ok || refused || len(dropped) > 0 || !bytes.Equal(again.Data, e.Data) {
			t.Fatalf("read again, %q became %q (dropped %q, refused %t)", e.Data, again.Data, dropped, refused)
		}
	})
}

// blockedMemberIn returns a blocked member of a JSON document a client
// could read from data, or "".
func blockedMemberIn(data []byte) string {
	views := [][]byte{data}
	views = append(views, bytes.Split(data, []byte("\n"))...)
	for _, v := range views {
		dec := json.NewDecoder(bytes.NewReader(v))
		for {
			var doc any
			if dec.Decode(&doc) != nil {
				break
			}
			if name := blockedIn(doc); name != "" {
				return name
			}
		}
	}
	for i := range data {
		if data[i] != '{' {
			continue
		}
		var doc any
		if json.NewDecoder(bytes.NewReader(data[i:])).Decode(&doc) == nil {
			if name := blockedIn(doc); name != "" {
				return name
			}
		}
	}
	return ""
}

func blockedIn(v any) string {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if sanitize.IsBlockedKey(k) {
				return k
			}
			if name := blockedIn(x); name != "" {
				return name
			}
		}
	case []any:
		for _, x := range t {
			if name := blockedIn(x); name != "" {
				return name
			}
		}
	}
	return ""
}
