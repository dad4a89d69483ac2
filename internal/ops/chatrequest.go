package ops

import (
	"cmp"
	"encoding/json"
	"strconv"

	"github.com/idemguard/idemguard/internal/jsonvalue"
)

// encodeChatRequest is json.Marshal(r), appended without reflection; a
// json.Number json.Marshal refuses is left to it, for its error.
// FuzzChatRequestJSON holds the two equal.
func encodeChatRequest(r chatRequest) ([]byte, error) {
	b, ok := appendChatRequest(make([]byte, 0, requestSize(&r)), &r)
	if !ok {
		return json.Marshal(r)
	}
	return append(b, '}'), nil
}

// marshalStreamRequest is json.Marshal(r), appended the same way: the
// request's members, then the stream's. FuzzStreamRequestEncoding holds the
// two equal.
func marshalStreamRequest(r *streamRequest) ([]byte, error) {
	b, ok := appendChatRequest(make([]byte, 0, requestSize(&r.chatRequest)+64), &r.chatRequest)
	if !ok {
		return json.Marshal(*r) // a copy: r stays on its caller's stack
	}
	b = strconv.AppendBool(append(b, `,"stream":`...), r.Stream)
	b = strconv.AppendBool(append(b, `,"stream_options":{"include_usage":`...), r.StreamOptions.IncludeUsage)
	return append(b, "}}"...), nil
}

// requestSize is about the length of r's JSON, so that appending it seldom
// grows the buffer.
func requestSize(r *chatRequest) int {
	n := 160 + len(r.Model) + len(r.SafetyIdentifier) + len(r.User)
	for _, m := range r.Messages {
		n += 32 + len(m.Role) + len(m.Content) + len(m.Content)/8
	}
	return n
}

// appendChatRequest appends r's JSON object to b as json.Marshal writes
// it, without its closing brace; false when a number is one json.Marshal
// must judge (it refuses an invalid one).
func appendChatRequest(b []byte, r *chatRequest) ([]byte, bool) {
	b = jsonvalue.AppendHTMLString(append(b, `{"model":`...), r.Model)
	b = append(b, `,"messages":`...)
	if r.Messages == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, m := range r.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonvalue.AppendHTMLString(append(b, `{"role":`...), m.Role)
			b = jsonvalue.AppendHTMLString(append(b, `,"content":`...), m.Content)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if r.MaxTokens != nil {
		b = strconv.AppendInt(append(b, `,"max_tokens":`...), int64(*r.MaxTokens), 10)
	}
	for _, n := range [...]struct {
		name string
		v    *json.Number
	}{{`,"temperature":`, r.Temperature}, {`,"top_p":`, r.TopP}} {
		if n.v == nil {
			continue
		}
		s := cmp.Or(string(*n.v), "0") // json.Marshal writes "" as 0
		if !validNumber(s) {
			return nil, false
		}
		b = append(append(b, n.name...), s...)
	}
	if r.Seed != nil {
		b = strconv.AppendInt(append(b, `,"seed":`...), *r.Seed, 10)
	}
	if len(r.Stop) > 0 {
		b = append(b, `,"stop":[`...)
		for i, s := range r.Stop {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonvalue.AppendHTMLString(b, s)
		}
		b = append(b, ']')
	}
	if r.SafetyIdentifier != "" {
		b = jsonvalue.AppendHTMLString(append(b, `,"safety_identifier":`...), r.SafetyIdentifier)
	}
	if r.User != "" {
		b = jsonvalue.AppendHTMLString(append(b, `,"user":`...), r.User)
	}
	return b, true
}

// validNumber reports whether s is a JSON number, all of it.
func validNumber(s string) bool {
	if s == "" || s[0] != '-' && (s[0] < '0' || s[0] > '9') || s[len(s)-1] < '0' || s[len(s)-1] > '9' {
		return false // another value, or white space around one
	}
	return jsonvalue.SurelyValid([]byte(s))
}
