package ops

import (
	"encoding/json"
	"strconv"

	"github.com/idemguard/idemguard/internal/jsonvalue"
)

// decodeChatInput decodes an openai_chat request body into a ChatInput
// exactly as decodeStrict does (encoding/json, unknown fields rejected), and
// with the same errors. The usual body takes a fast path: decoded by
// jsonvalue, it is taken only when every member has exactly the name and
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

func fastChatInput(b []byte) (in ChatInput, ok bool) {
	v, ok := jsonvalue.DecodeUniqueKeys(b)
	if !ok {
		return ChatInput{}, false
	}
	top, ok := v.(map[string]any)
	if !ok {
		return ChatInput{}, false
	}
	for name, v := range top {
		switch name {
		case "messages":
			if in.Messages, ok = chatMessages(v); !ok {
				return ChatInput{}, false
			}
		case "max_tokens":
			n, ok := v.(json.Number)
			if !ok {
				return ChatInput{}, false
			}
			i, err := strconv.ParseInt(string(n), 10, strconv.IntSize)
			if err != nil {
				return ChatInput{}, false
			}
			mt := int(i)
			in.MaxTokens = &mt
		case "temperature", "top_p":
			n, ok := v.(json.Number)
			if !ok {
				return ChatInput{}, false
			}
			if name == "temperature" {
				in.Temperature = &n
			} else {
				in.TopP = &n
			}
		case "seed":
			n, ok := v.(json.Number)
			if !ok {
				return ChatInput{}, false
			}
			i, err := strconv.ParseInt(string(n), 10, 64)
			if err != nil {
				return ChatInput{}, false
			}
			in.Seed = &i
		case "stop":
			arr, ok := v.([]any)
			if !ok {
				return ChatInput{}, false
			}
			in.Stop = make([]string, len(arr))
			for i, s := range arr {
				if in.Stop[i], ok = s.(string); !ok {
					return ChatInput{}, false
				}
			}
		default:
			return ChatInput{}, false
		}
	}
	return in, true
}

func chatMessages(v any) ([]ChatMessage, bool) {
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	msgs := make([]ChatMessage, len(arr))
	for i, m := range arr {
		obj, ok := m.(map[string]any)
		if !ok {
			return nil, false
		}
		for name, v := range obj {
			s, ok := v.(string)
			if !ok {
				return nil, false
			}
			switch name {
			case "role":
				msgs[i].Role = s
			case "content":
				msgs[i].Content = s
			default:
				return nil, false
			}
		}
	}
	return msgs, true
}
