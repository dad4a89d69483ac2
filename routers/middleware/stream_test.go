package middleware

import (
	"bytes"
	"testing"

	"github.com/idemguard/idemguard/internal/blockedscan"
	"github.com/idemguard/idemguard/internal/eventdata"
	"github.com/idemguard/idemguard/internal/live"
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
		if name := blockedscan.Member(e.Data, true); name != "" {
			t.Fatalf("kept data %q holds the blocked member %q", e.Data, name)
		}
		wire := live.AppendSSE(nil, live.Event{Type: e.Type, Data: e.Data})
		again, dropped, refused, ok := eventdata.Parse(bytes.TrimSuffix(wire, []byte("\n\n")), "")
		if !ok || refused || len(dropped) > 0 || !bytes.Equal(again.Data, e.Data) {
			t.Fatalf("read again, %q became %q (dropped %q, refused %t)", e.Data, again.Data, dropped, refused)
		}
	})
}
