package idemguard

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzEncodeStoredMatchesMarshal: an answer with usage only is stored as
// json.Marshal stores its wrapper, byte for byte, whatever the body (the
// fast path takes the bodies encoding/json writes unchanged).
func FuzzEncodeStoredMatchesMarshal(f *testing.F) {
	for _, s := range []string{
		`{"ok":true,"stopReason":"completed","data":{"text":"Retries, once: the guard remembers.","finish_reason":"stop"}}`,
		`{"ok":true,"data":{"t":"a \"q\" \\ \u003c\u003e\u0026 \u2028 é"}}`, `{"a":"<b>"}`, `{"a":"x & y"}`, "{\"a\":\"\u2028\"}", "{\"a\":\"\u2029\"}",
		`{"a": 1}`, ` {"a":1}`, "{\"a\":1}\n", `{"a":"b c\td"}`, `{"a":[1,2,{"b":null}]}`, `{"a":1`, ``, `null`, `"s"`, `1e3`, "\"\xff\"",
		`{"a":"\\"}`, `{"a":"\\\" <"}`,
	} {
		f.Add([]byte(s), int64(12), int64(8))
	}
	f.Add([]byte(`{}`), int64(0), int64(3))
	f.Add([]byte(`{}`), int64(-4), int64(0))
	f.Fuzz(func(t *testing.T, body []byte, prompt, completion int64) {
		usage := Usage{PromptTokens: prompt, CompletionTokens: completion}
		if usage == (Usage{}) {
			return // stored as the body itself, before and after
		}
		want, wantErr := json.Marshal(storedWrapper{Body: body, Usage: &usage})
		got, gotErr := encodeStored(body, false, nil, nil, usage)
		if (wantErr == nil) != (gotErr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("encodeStored(%q, %+v) = %s, %v; json.Marshal: %s, %v", body, usage, got, gotErr, want, wantErr)
		}
	})
}

// TestEncodeStoredTakesEnvelopesAsTheyAre: an envelope as sanitize writes
// it is stored without encoding/json.
func TestEncodeStoredTakesEnvelopesAsTheyAre(t *testing.T) {
	for _, s := range []string{`{"ok":true,"data":{"text":"a \"b\" c\\","n":12}}`, `{"ok":false,"stopReason":"timeout"}`} {
		if !compactAsIs([]byte(s)) {
			t.Errorf("compactAsIs(%s) = false", s)
		}
	}
}
