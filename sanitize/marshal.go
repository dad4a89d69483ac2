package sanitize

import (
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// appendEnvelope appends e's JSON exactly as marshalJSON (encoding/json with
// HTML escaping off) encodes it, without reflection: the envelope is encoded
// on every stored result and every replay. It reports false, having appended
// nothing useful, when a data value is not one a sanitized envelope holds
// (string, bool, nil, a valid json.Number, or []any of those); Marshal then
// uses encoding/json. TestMarshalMatchesEncodingJSON and its fuzz target
// hold the two byte for byte.
func appendEnvelope(b []byte, e Envelope) ([]byte, bool) {
	b = append(b, `{"ok":`...)
	b = strconv.AppendBool(b, e.OK)
	b = append(b, `,"stopReason":`...)
	b = appendJSONString(b, string(e.StopReason))
	if len(e.CreatedActionRequestIDs) > 0 {
		b = append(b, `,"createdActionRequestIds":[`...)
		for i, id := range e.CreatedActionRequestIDs {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, id, 10)
		}
		b = append(b, ']')
	}
	if e.TraceID != "" {
		b = append(b, `,"traceId":`...)
		b = appendJSONString(b, e.TraceID)
	}
	b = append(b, `,"needsHuman":`...)
	b = strconv.AppendBool(b, e.NeedsHuman)
	b = append(b, `,"cached":`...)
	b = strconv.AppendBool(b, e.Cached)
	if len(e.Data) > 0 {
		keys := make([]string, 0, len(e.Data))
		for k := range e.Data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, `,"data":{`...)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			var ok bool
			if arr, isArr := e.Data[k].([]any); isArr {
				if arr == nil {
					return b, false
				}
				b = append(b, '[')
				for j, el := range arr {
					if j > 0 {
						b = append(b, ',')
					}
					if b, ok = appendPrimitive(b, el); !ok {
						return b, false
					}
				}
				b = append(b, ']')
				continue
			}
			if b, ok = appendPrimitive(b, e.Data[k]); !ok {
				return b, false
			}
		}
		b = append(b, '}')
	}
	return append(b, '}'), true
}

// appendPrimitive appends a string, bool, nil or valid json.Number.
func appendPrimitive(b []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case string:
		return appendJSONString(b, x), true
	case bool:
		return strconv.AppendBool(b, x), true
	case json.Number:
		if !validNumber(string(x)) {
			return b, false // encoding/json writes "" as 0 and rejects the rest
		}
		return append(b, x...), true
	}
	return b, false
}

const hexDigits = "0123456789abcdef"

// appendJSONString is encoding/json's string encoding with HTML escaping
// off: \" \\ \b \f \n \r \t, other control bytes as \u00XX, invalid UTF-8
// as \ufffd, U+2028 and U+2029 escaped, everything else as is.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// validNumber reports whether s is a JSON number literal (RFC 8259).
func validNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		d := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		d := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	return i == len(s)
}
