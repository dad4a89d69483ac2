package ops

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// chatInputSeeds are bodies the fast path must take or must leave to
// encoding/json: repeated members (which encoding/json merges), names in
// another case (which it matches), nulls, numbers that are not plain
// integers, numbers as strings, escapes, invalid UTF-8, trailing data.
var chatInputSeeds = []string{
	`{"messages":[{"role":"user","content":"hi"}]}`,
	`{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"Tell me \"x\"\n\u00e9\ud83d\ude00"}],"max_tokens":64,"temperature":0.5,"top_p":1,"seed":-7,"stop":["\n","END"]}`,
	` { "messages" : [ ] , "stop" : [ ] } `,
	`{"messages":[{"role":"user","content":"a"}],"messages":[{"role":"system"}]}`,
	`{"messages":[{"role":"user","content":"a"}],"m\u0065ssages":[{"role":"system"}]}`,
	`{"messages":[{"role":"user","role":"system","content":"a"}]}`,
	`{"Messages":[{"Role":"user","CONTENT":"hi"}]}`,
	`{"messages":null}`,
	`{"messages":[{"role":null,"content":"x"}]}`,
	`{"messages":[null]}`,
	`{"messages":[{"role":"user","content":"x"}],"max_tokens":1.0}`,
	`{"messages":[{"role":"user","content":"x"}],"max_tokens":1e2}`,
	`{"messages":[{"role":"user","content":"x"}],"max_tokens":-0}`,
	`{"messages":[{"role":"user","content":"x"}],"max_tokens":99999999999999999999}`,
	`{"messages":[{"role":"user","content":"x"}],"seed":9223372036854775807}`,
	`{"messages":[{"role":"user","content":"x"}],"seed":9223372036854775808}`,
	`{"messages":[{"role":"user","content":"x"}],"temperature":"0.5"}`,
	`{"messages":[{"role":"user","content":"x"}],"temperature":-1.5e-3}`,
	`{"messages":[{"role":"user","content":"x"}],"stop":"END"}`,
	`{"messages":[{"role":"user","content":"x"}],"stop":[1]}`,
	`{"messages":[{"role":"user","content":"x"}],"model":"gpt-4"}`,
	`{"messages":[{"role":"user","content":"x","name":"n"}]}`,
	`{"messages":[{"role":"user","content":1}]}`,
	"{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}",
	`{"messages":[{"role":"user","content":"\ud800"}]}`,
	`{"messages":[{"role":"user","content":"x"}]} {}`,
	`{"messages":[{"role":"user","content":"x"}]`,
	`[]`,
	`"messages"`,
	`null`,
	``,
}

// checkChatInputDecoding fails when the fast path takes a body that
// encoding/json decodes differently or rejects, or when decodeChatInput's
// answer is not decodeStrict's.
func checkChatInputDecoding(t *testing.T, b []byte) (fast bool) {
	var want ChatInput
	werr := decodeStrict(b, &want)
	got, gerr := decodeChatInput(b)
	if in, ok := fastChatInput(b); ok {
		require.NoError(t, werr, "the fast path took %q; encoding/json rejects it", b)
		require.Equal(t, want, in, "input %q", b)
		fast = true
	}
	if werr != nil {
		require.EqualError(t, gerr, werr.Error(), "input %q", b)
	} else {
		require.NoError(t, gerr, "input %q", b)
		require.Equal(t, want, got, "input %q", b)
	}
	return fast
}

func TestDecodeChatInputMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for i, s := range chatInputSeeds {
		fast := checkChatInputDecoding(t, []byte(s))
		if i < 3 {
			require.True(t, fast, "the usual body %q takes the fast path", s)
		}
	}
}

func FuzzDecodeChatInput(f *testing.F) {
	for _, s := range chatInputSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkChatInputDecoding(t, b) })
}

// BenchmarkDecodeChatInput is the usual body of a chat call decoded.
func BenchmarkDecodeChatInput(b *testing.B) {
	body := []byte(`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"stream 7"}],"temperature":0.2}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeChatInput(body); err != nil {
			b.Fatal(err)
		}
	}
}

// The usual body is decoded without a map or an interface value per
// member: its slice, its texts and its number, 5 allocations (7 with
// -race; 27 when it was decoded into generic values first).
func TestDecodeChatInputAllocatesLittle(t *testing.T) {
	body := []byte(`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"stream 7"}],"temperature":0.2}`)
	require.LessOrEqual(t, testing.AllocsPerRun(10, func() { _, _ = decodeChatInput(body) }), 8.0)
}
