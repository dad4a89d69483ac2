package ops

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkStreamRequestEncoding fails when marshalStreamRequest's bytes or
// error differ from json.Marshal's.
func checkStreamRequestEncoding(t *testing.T, r streamRequest) {
	want, werr := json.Marshal(r)
	got, gerr := marshalStreamRequest(&r)
	if werr != nil {
		require.Error(t, gerr, "request %+v", r)
		return
	}
	require.NoError(t, gerr, "request %+v", r)
	require.Equal(t, string(want), string(got), "request %+v", r)
}

func TestStreamRequestEncodingMatchesJSONMarshal(t *testing.T) {
	t.Parallel()
	for _, s := range chatInputSeeds {
		in, err := decodeChatInput([]byte(s))
		if err != nil {
			continue
		}
		for _, actor := range []string{"", "actor-<1>&\u2028"} {
			checkStreamRequestEncoding(t, streamRequest{chatRequest: chatRequest{Model: "gpt-<m>", ChatInput: in, SafetyIdentifier: actor},
				Stream: true, StreamOptions: streamOptions{IncludeUsage: true}})
			checkStreamRequestEncoding(t, streamRequest{chatRequest: chatRequest{ChatInput: in, User: actor}})
		}
	}
	for _, n := range []json.Number{"", " 1", "1 ", "01", "-", "1.5e+3", "-0.0", "1e", "\"1\"", "0x1", "7"} {
		checkStreamRequestEncoding(t, streamRequest{chatRequest: chatRequest{Model: "m", ChatInput: ChatInput{Temperature: &n}}})
		checkStreamRequestEncoding(t, streamRequest{chatRequest: chatRequest{Model: "m", ChatInput: ChatInput{TopP: &n, Stop: []string{}}}})
	}
}

func FuzzStreamRequestEncoding(f *testing.F) {
	for _, s := range chatInputSeeds {
		f.Add([]byte(s), "gpt-4o", "", "1.5")
	}
	f.Add([]byte(`{"messages":[{"role":"user","content":"<\u2029>"}],"stop":["&"]}`), "m\x00", "a\xff", "1 ")
	f.Fuzz(func(t *testing.T, body []byte, model, actor, number string) {
		in, err := decodeChatInput(body)
		if err != nil {
			in = ChatInput{}
		}
		if number != "" {
			n := json.Number(number)
			in.TopP = &n
		}
		checkStreamRequestEncoding(t, streamRequest{chatRequest: chatRequest{Model: model, ChatInput: in, User: actor},
			Stream: true, StreamOptions: streamOptions{IncludeUsage: true}})
	})
}

// BenchmarkMarshalStreamRequest is the usual streamed request encoded.
func BenchmarkMarshalStreamRequest(b *testing.B) {
	in, err := decodeChatInput([]byte(`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"stream 7"}],"temperature":0.2}`))
	require.NoError(b, err)
	r := streamRequest{chatRequest: chatRequest{Model: "gpt-4o-mini", ChatInput: in}, Stream: true, StreamOptions: streamOptions{IncludeUsage: true}}
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = marshalStreamRequest(&r)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(r)
		}
	})
}
