package ops

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// chunkSeeds are upstream chunks as providers send them, and the shapes
// that decodeChunk must leave to encoding/json.
var chunkSeeds = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{"content":"Hello \u003cb\u003e \"q\" \\ \n ünï €"},"finish_reason":null}]}`,
	`{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
	`{"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":20,"total_tokens":32,"prompt_tokens_details":{"cached_tokens":0}}}`,
	`{"choices":null,"usage":null}`,
	`{"Choices":[{"index":1}]}`,
	`{"choices":[{"index":0}],"choices":[{"index":1,"delta":{"content":"x"}}]}`,
	`{"choices":[{"index":1.0}]}`,
	`{"choices":[{"index":-3,"INDEX":2}]}`,
	`{"choices":[null,{"delta":null}]}`,
	`{"choices":[{"delta":{"content":"\ud800 bad"},"finish_reason":"le\u006egth"}]}`,
	"{\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\"}}]}",
	`{"ch\u006fices":[{"index":2}]}`,
	`{"usage":{"prompt_tokens":1e2}}`,
	`{"usage":{"total_tokens":99999999999999999999}}`,
	`{"usage":"x"}`,
	`{"choices":"x"}`,
	`{"choices":[{"delta":{"role":5}}]}`,
	` { "choices" : [ { "index" : 0 , "delta" : { "content" : "a" } } ] , "x" : [ { "y" : "}]" } , 1.5e3 , true ] } `,
	`"<a href='x'>&amp; \u2028 \u2029 \t \b \f \r \u0001 \u007f \ud800 é"`, "\"\xff\xe2\x80\"",
	`[]`, `null`, `"s"`, `{}`, `{"choices":[{}]}`, `{"usage":{}}`, `{"choices":[],"usage":{"prompt_tokens":-0}}`,
}

// FuzzChunkJSON checks decodeChunk against json.Unmarshal, and appendChunk
// against json.Marshal, on the same inputs.
func FuzzChunkJSON(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want, got upstreamChunk
		wantErr := json.Unmarshal(data, &want)
		gotErr := decodeChunk(data, &got)
		if (wantErr == nil) != (gotErr == nil) || wantErr == nil && !reflect.DeepEqual(want, got) {
			t.Fatalf("decodeChunk(%q) = %+v, %v; json.Unmarshal: %+v, %v", data, got, gotErr, want, wantErr)
		}
		// Every string of the document as a member of an event.
		var s string
		if json.Unmarshal(data, &s) != nil {
			s = string(data)
		}
		for _, c := range []chunkEvent{
			{Object: s, Choices: []choiceEvent{{Index: len(s), Delta: deltaEvent{Role: s, Content: &s}, FinishReason: &s}}},
			{Object: "chat.completion.chunk", Choices: []choiceEvent{{Delta: deltaEvent{Content: &s}}, {FinishReason: &s}}},
			{Object: s, Usage: &chunkUsage{PromptTokens: -int64(len(s)), TotalTokens: 1 << 62}},
			{Choices: []choiceEvent{{Delta: deltaEvent{Role: s}}}},
		} {
			want, err := json.Marshal(c)
			if c.Choices == nil {
				want, err = json.Marshal(chunkEvent{Object: c.Object, Choices: []choiceEvent{}, Usage: c.Usage})
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := appendChunk(nil, c); !bytes.Equal(got, want) {
				t.Fatalf("appendChunk(%+v) = %s, json.Marshal: %s", c, got, want)
			}
		}
	})
}

// TestDecodeChunkReadsProvidersChunks: the chunks providers send are read
// by the fast path, not handed to encoding/json.
func TestDecodeChunkReadsProvidersChunks(t *testing.T) {
	for _, s := range chunkSeeds[:5] {
		var c upstreamChunk
		d := chunkDecoder{b: []byte(s)}
		if !d.chunk(&c) || !d.end() {
			t.Errorf("the fast path left %s to encoding/json", s)
		}
	}
}

// responseSeeds are chat completions as providers send them, and the
// shapes that decodeChatResponse must leave to encoding/json.
var responseSeeds = []string{
	`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello \u003cb\u003e \"q\" ünï","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0}},"service_tier":"default","system_fingerprint":null}`,
	`{"choices":[{"message":{"content":null,"tool_calls":[{"id":"x","function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
	`{"choices":[{"index":0,"message":{"content":"a"},"finish_reason":"stop"},{"index":1,"message":{"content":"b"},"finish_reason":"length"}]}`,
	`{"choices":[]}`,
	`{"choices":null,"usage":{}}`,
	`{"choices":[{"message":null}]}`,
	`{"choices":[{"finish_reason":null}]}`,
	`{"choices":[null]}`,
	`{"usage":null}`,
	`{"choices":[{"Message":{"content":"x"}}]}`,
	`{"choices":[{"message":{"CONTENT":"x"}}]}`,
	`{"choices":[{"message":{"content":"x","content":"y"}}]}`,
	`{"choices":[{"finish_reason":5}]}`,
	`{"choices":[{"message":{"content":"\ud800 bad \u0041"}}]}`,
	"{\"choices\":[{\"message\":{\"content\":\"\xff\"}}]}",
	`{"usage":{"prompt_tokens":1.5}}`,
	`{"usage":{"prompt_tokens":"1"}}`,
	`{"choices":[{"message":{"content":"a"}}]} x`,
	`[{"choices":[]}]`,
}

// FuzzChatResponseJSON checks decodeChatResponse against json.Unmarshal.
func FuzzChatResponseJSON(f *testing.F) {
	for _, s := range append(responseSeeds, chunkSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want, got chatResponse
		wantErr := json.Unmarshal(data, &want)
		gotErr := decodeChatResponse(data, &got)
		if (wantErr == nil) != (gotErr == nil) || wantErr == nil && !reflect.DeepEqual(want, got) {
			t.Fatalf("decodeChatResponse(%q) = %+v, %v; json.Unmarshal: %+v, %v", data, got, gotErr, want, wantErr)
		}
	})
}

// TestDecodeChatResponseReadsProvidersAnswers: the answers providers send
// are read by the fast path, not handed to encoding/json.
func TestDecodeChatResponseReadsProvidersAnswers(t *testing.T) {
	for _, s := range responseSeeds[:5] {
		var r chatResponse
		d := chunkDecoder{b: []byte(s)}
		if !d.chatResponse(&r) || !d.end() {
			t.Errorf("the fast path left %s to encoding/json", s)
		}
	}
}

// TestDecoderStringAllocatesItsTextOnly: a string without escapes costs
// the decoder one allocation, its text.
func TestDecoderStringAllocatesItsTextOnly(t *testing.T) {
	b := []byte(`"Retries, once: the guard remembers."`)
	if n := testing.AllocsPerRun(100, func() {
		d := chunkDecoder{b: b}
		if _, ok := d.string(); !ok {
			t.Fatal("not read")
		}
	}); n != 1 {
		t.Errorf("%v allocations, want 1", n)
	}
}

// FuzzChatRequestJSON checks encodeChatRequest against json.Marshal: the
// same bytes, or an error from both.
func FuzzChatRequestJSON(f *testing.F) {
	f.Add("gpt-4o", "user", "Hello <b> & \u2028 \"q\" \\ \n ünï", "0.5", "END", "actor-1", 64, int64(-7), uint16(0xffff))
	f.Add("", "", "", "", "", "", 0, int64(0), uint16(0))
	f.Add("m", "system", "\xff\xfe", "1e400", "\n", "", -1, int64(1)<<62, uint16(0x5555))
	f.Add("m", "user", "x", "01", "", "u", 1, int64(1), uint16(0x0f0f))
	f.Add("m", "user", "x", " 1", "", "u", 1, int64(1), uint16(0x00f0))
	f.Fuzz(func(t *testing.T, model, role, content, num, stop, actor string, maxTokens int, seed int64, flags uint16) {
		n := json.Number(num)
		r := chatRequest{Model: model}
		if flags&1 != 0 {
			r.Messages = []ChatMessage{{Role: role, Content: content}, {Role: content, Content: role}}[:flags>>14&1+flags>>15]
		}
		if flags&2 != 0 {
			r.MaxTokens = &maxTokens
		}
		if flags&4 != 0 {
			r.Temperature = &n
		}
		if flags&8 != 0 {
			r.TopP = &n
		}
		if flags&16 != 0 {
			r.Seed = &seed
		}
		if flags&32 != 0 {
			r.Stop = []string{stop, content, actor}[:flags>>6&3]
		}
		if flags&64 != 0 {
			r.SafetyIdentifier = actor
		}
		if flags&128 != 0 {
			r.User = actor
		}
		want, wantErr := json.Marshal(r)
		got, gotErr := encodeChatRequest(r)
		if (wantErr == nil) != (gotErr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("encodeChatRequest(%+v) = %s, %v; json.Marshal: %s, %v", r, got, gotErr, want, wantErr)
		}
	})
}

// A finish reason as a value of the answer's data is the reason itself;
// a known one's is made once.
func TestFinishReasonValue(t *testing.T) {
	for _, r := range append([]string{"", "other", "STOP"}, finishReasons...) {
		if got := finishReasonValue(r); got != any(r) {
			t.Errorf("finishReasonValue(%q) = %#v", r, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = finishReasonValue("tool_calls") }); n != 0 {
		t.Errorf("a known reason allocates: %v", n)
	}
}
