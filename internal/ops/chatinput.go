package ops

import "github.com/idemguard/idemguard/internal/jsonvalue"

// decodeChatInput decodes an openai_chat request body into a ChatInput
// exactly as decodeStrict does (encoding/json, unknown fields rejected), and
// with the same errors. The usual body takes a fast path: read by the
// chunk decoder, it is taken only when every member has exactly the name and
// JSON type ChatInput declares, so that encoding/json could only have
// produced the same value; anything else (a null, a member name in another
// case, a number that is not a plain integer where one is needed, any
// invalid JSON) goes to decodeStrict, which decides and words the error.
// FuzzDecodeChatInput holds the two equal.
func decodeChatInput(b []byte) (ChatInput, error) {
	if in, ok := fastChatInput(b); ok {
		return in, nil
	}
	var in ChatInput
	err := decodeStrict(b, &in)
	return in, err
}

// The members of a ChatInput and of its messages, by position in known's
// fields.
var (
	chatInputFields   = []string{"messages", "max_tokens", "temperature", "top_p", "seed", "stop"}
	chatMessageFields = []string{"role", "content"}
)

// fastChatInput reads b with the chunk decoder, strictly (an unknown
// member declines), straight into a ChatInput: no generic maps between.
func fastChatInput(b []byte) (in ChatInput, ok bool) {
	if !jsonvalue.Valid(b) {
		return ChatInput{}, false
	}
	d := chunkDecoder{b: b, strict: true}
	if !d.object(chatInputFields, func(i int) bool { return d.chatInputMember(&in, i) }) || !d.end() {
		return ChatInput{}, false
	}
	return in, true
}

// chatInputMember reads the value of the member chatInputFields[i] into
// in: false (encoding/json decides) for a null, a number that is not a
// plain integer where one is needed, or any other type than declared.
func (d *chunkDecoder) chatInputMember(in *ChatInput, i int) bool {
	switch i {
	case 0:
		in.Messages = make([]ChatMessage, 0, 2)
		return d.array(func() bool {
			in.Messages = append(in.Messages, ChatMessage{})
			m := &in.Messages[len(in.Messages)-1]
			return d.object(chatMessageFields, func(i int) bool {
				s, ok := d.string()
				if i == 0 {
					m.Role = internRole(s)
				} else {
					m.Content = s
				}
				return ok
			})
		})
	case 1:
		n, ok := d.integer()
		mt := int(n)
		in.MaxTokens = &mt
		return ok && int64(mt) == n
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
	in.Stop = make([]string, 0, 1)
	return d.array(func() bool {
		s, ok := d.string()
		in.Stop = append(in.Stop, s)
		return ok
	})
}

// internRole is s, as one of chatRoles' own strings when it is one (a
// message's role is one of a few words; no copy of it per message).
func internRole(s string) string {
	for _, r := range [...]string{"user", "assistant", "system", "developer"} {
		if s == r {
			return r
		}
	}
	return s
}
