package ops

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/sanitize"
)

// ValidateChatInput returns the validation of an openai_chat scope's
// inputs, run before the guard claims the key: nil when OpenAIChat(cfg)
// with this cap would accept them, otherwise an *idemguard.InputError
// naming every field that does not fit ChatInput (missing, unknown, of the
// wrong type, out of range) by its JSON Pointer. Its details never quote a
// value.
func ValidateChatInput(maxTokens int) func(inputs json.RawMessage) error {
	return func(inputs json.RawMessage) error {
		_, err := chatInput(inputs, maxTokens)
		return err
	}
}

// chatInput decodes and checks inputs exactly as the operation does, and
// on failure describes every bad field. The decision is decodeChatInput's
// and checkChatInput's, so the validation before the claim accepts exactly
// what the operation accepts; the walk over the value only names the
// fields.
func chatInput(inputs json.RawMessage, maxTokens int) (ChatInput, error) {
	in, err := decodeChatInput(inputs)
	if err == nil {
		err = checkChatInput(&in, maxTokens)
	}
	if err == nil {
		return in, nil
	}
	fields := chatFieldErrors(inputs, maxTokens)
	if len(fields) == 0 {
		var ie *idemguard.InputError
		if errors.As(err, &ie) {
			return ChatInput{}, ie
		}
		fields = []idemguard.FieldError{{Pointer: "", Detail: describeJSONError(err)}}
	}
	return ChatInput{}, &idemguard.InputError{Fields: fields}
}

// chatFields are the members of ChatInput, in the order they are listed to
// a caller.
var chatFields = []string{"messages", "max_tokens", "temperature", "top_p", "seed", "stop"}

const chatRoleList = "system, developer, user or assistant"

// chatFieldErrors names the fields of inputs that do not fit ChatInput.
// Member names match as encoding/json matches them (case-insensitively); a
// null is an absent value, as encoding/json takes it.
func chatFieldErrors(inputs json.RawMessage, maxTokens int) []idemguard.FieldError {
	var v any
	dec := json.NewDecoder(bytes.NewReader(inputs))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil || dec.More() {
		return []idemguard.FieldError{{Pointer: "", Detail: "must be one JSON object"}}
	}
	top, ok := v.(map[string]any)
	if !ok {
		return []idemguard.FieldError{{Pointer: "", Detail: `must be a JSON object: {"messages":[{"role":…,"content":…}], …}`}}
	}
	var out []idemguard.FieldError
	add := func(pointer, format string, args ...any) {
		out = append(out, idemguard.FieldError{Pointer: pointer, Detail: fmt.Sprintf(format, args...)})
	}
	names := make([]string, 0, len(top))
	for name := range top {
		names = append(names, name)
	}
	sort.Strings(names)
	sawMessages := false
	for _, name := range names {
		val, p := top[name], pointer(name)
		field := ""
		for _, f := range chatFields {
			if strings.EqualFold(name, f) {
				field = f
			}
		}
		if val == nil && field != "" {
			continue
		}
		switch field {
		case "messages":
			sawMessages = true
			chatMessageErrors(val, p, add)
		case "max_tokens":
			n, ok := integer(val, strconv.IntSize)
			switch {
			case !ok:
				add(p, "must be an integer")
			case n < 1:
				add(p, "must be positive")
			case maxTokens > 0 && n > int64(maxTokens):
				add(p, "must be at most %d (the configured cap)", maxTokens)
			}
		case "temperature", "top_p":
			if !isNumber(val) {
				add(p, "must be a number")
			}
		case "seed":
			if _, ok := integer(val, 64); !ok {
				add(p, "must be an integer")
			}
		case "stop":
			arr, ok := val.([]any)
			if !ok {
				add(p, "must be an array of strings")
				break
			}
			for i, s := range arr {
				if _, ok := s.(string); !ok && s != nil {
					add(p+"/"+strconv.Itoa(i), "must be a string")
				}
			}
		default:
			if strings.EqualFold(name, "model") {
				add(p, "is not accepted: the model is set by the server's configuration")
			} else {
				add(p, "is not a field of the inputs; the fields are %s", strings.Join(chatFields, ", "))
			}
		}
	}
	if !sawMessages {
		add("/messages", "is required: an array of 1 to %d messages {\"role\":…,\"content\":…}", MaxChatMessages)
	}
	return out
}

func chatMessageErrors(val any, p string, add func(pointer, format string, args ...any)) {
	arr, ok := val.([]any)
	if !ok {
		add(p, "must be an array of messages {\"role\":…,\"content\":…}")
		return
	}
	if len(arr) == 0 || len(arr) > MaxChatMessages {
		add(p, "must hold 1 to %d messages, got %d", MaxChatMessages, len(arr))
	}
	for i, m := range arr {
		mp := p + "/" + strconv.Itoa(i)
		if m == nil {
			add(mp+"/role", "is required: one of %s", chatRoleList)
			continue
		}
		obj, ok := m.(map[string]any)
		if !ok {
			add(mp, "must be an object {\"role\":…,\"content\":…}")
			continue
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		role, roleBad := "", false
		for _, k := range keys {
			v := obj[k]
			switch {
			case strings.EqualFold(k, "role"):
				if s, ok := v.(string); ok {
					role = s
				} else if v != nil {
					add(mp+pointer(k), "must be a string: one of %s", chatRoleList)
					roleBad = true
				}
			case strings.EqualFold(k, "content"):
				if _, ok := v.(string); !ok && v != nil {
					add(mp+pointer(k), "must be a string")
				}
			default:
				add(mp+pointer(k), "is not a field of a message; the fields are role and content")
			}
		}
		switch {
		case roleBad:
		case role == "":
			add(mp+"/role", "is required: one of %s", chatRoleList)
		case !chatRoles[role]:
			add(mp+"/role", "must be one of %s", chatRoleList)
		}
	}
}

// pointer is the JSON Pointer (RFC 6901) token of a member name, with its
// leading "/".
func pointer(name string) string {
	return "/" + strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
}

// integer reports whether v is a JSON number encoding/json decodes into an
// integer of the given size.
func integer(v any, bits int) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(string(n), 10, bits)
	return i, err == nil
}

// isNumber reports whether v decodes into a json.Number: a number, or a
// string holding one.
func isNumber(v any) bool {
	switch n := v.(type) {
	case json.Number:
		return true
	case string:
		var num json.Number
		return json.Unmarshal([]byte(strconv.Quote(n)), &num) == nil
	}
	return false
}

// inputError is the operation's error for inputs that fail validation: a
// final invalid_input.
func inputError(err error) error {
	return &idemguard.OpError{Reason: sanitize.InvalidInput, Err: err}
}
