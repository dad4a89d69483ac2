package ops

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// decodeChatInput decodes an openai_chat request body into a ChatInput
// exactly as decodeStrict does (encoding/json, unknown fields rejected), and
// with the same errors. The usual body takes a fast path: read in one pass
// by the chunk decoder's primitives, it is taken only when every member has
// exactly the name and JSON type ChatInput declares, so that encoding/json
// could only have produced the same value; anything else (a null, a member
// name in another case or escaped, a number that is not a plain integer
// where one is needed, any invalid JSON) goes to decodeStrict, which
// decides and words the error. FuzzDecodeChatInput holds the two equal.
func decodeChatInput(b []byte) (ChatInput, error) {
	if in, ok := fastChatInput(b); ok {
		return in, nil
	}
	var in ChatInput
	err := decodeStrict(b, &in)
	return in, err
}

// The members of a body and of a message, by position in known's fields.
var (
	chatInputFields   = []string{"messages", "max_tokens", "temperature", "top_p", "seed", "stop"}
	chatMessageFields = []string{"role", "content"}
)

func fastChatInput(b []byte) (in ChatInput, ok bool) {
	if !json.Valid(b) {
		return ChatInput{}, false
	}
	d := chunkDecoder{b: b}
	if !d.strictObject(chatInputFields, func(i int) bool { return d.chatInputMember(&in, i) }) || !d.end() {
		return ChatInput{}, false
	}
	return in, true
}

// chatInputMember reads the value of the body's member chatInputFields[i].
func (d *chunkDecoder) chatInputMember(in *ChatInput, i int) bool {
	switch i {
	case 0:
		in.Messages = make([]ChatMessage, 0, 2)
		return d.array(func() bool {
			in.Messages = append(in.Messages, ChatMessage{})
			m := &in.Messages[len(in.Messages)-1]
			return d.strictObject(chatMessageFields, func(i int) bool {
				if i == 0 {
					return d.string(&m.Role)
				}
				return d.string(&m.Content)
			})
		})
	case 1:
		n, ok := d.integer()
		if mt := int(n); ok && int64(mt) == n {
			in.MaxTokens = &mt
			return true
		}
		return false
	case 2, 3:
		n, ok := d.number()
		if i == 2 {
			in.Temperature = &n
		} else {
			in.TopP = &n
		}
		return ok
	case 4:
		n, ok := d.integer()
		in.Seed = &n
		return ok
	}
	in.Stop = make([]string, 0, 2)
	return d.array(func() bool {
		in.Stop = append(in.Stop, "")
		return d.string(&in.Stop[len(in.Stop)-1])
	})
}

// strictObject is object for a type whose every member is one of fields:
// another member, as a null value, is left to encoding/json (false).
func (d *chunkDecoder) strictObject(fields []string, value func(i int) bool) bool {
	var seen names
	if !d.open() {
		return false
	}
	for {
		name, more := d.member()
		if !more {
			return true
		}
		if i, ok := seen.known(name, fields...); !ok || i < 0 || d.peek() == 'n' || !value(i) {
			return false
		}
	}
}

// array reads an array (not null), elem reading each element.
func (d *chunkDecoder) array(elem func() bool) bool {
	if d.peek() != '[' {
		return false
	}
	d.i++
	if d.peek() == ']' {
		d.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.peek() == ']' {
			d.i++
			return true
		}
		d.i++ // the comma
	}
}

// string reads a string (not null) into *s, as encoding/json does; a
// chat role is not copied.
func (d *chunkDecoder) string(s *string) bool {
	if d.peek() != '"' {
		return false
	}
	raw := d.str()
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') >= 0 || !utf8.Valid(body) {
		return json.Unmarshal(raw, s) == nil
	}
	switch string(body) {
	case "user":
		*s = "user"
	case "assistant":
		*s = "assistant"
	case "system":
		*s = "system"
	default:
		*s = string(body)
	}
	return true
}

// number reads a number token as its literal (not a string holding one).
func (d *chunkDecoder) number() (json.Number, bool) {
	if c := d.peek(); c != '-' && (c < '0' || c > '9') {
		return "", false
	}
	start := d.i
	d.skip()
	return json.Number(d.b[start:d.i]), true
}
