package sanitize

import (
	"encoding/json"
	"slices"
	"strconv"

	"github.com/idemguard/idemguard/internal/jsonvalue"
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
	b = jsonvalue.AppendString(b, string(e.StopReason))
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
		b = jsonvalue.AppendString(b, e.TraceID)
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
			b = jsonvalue.AppendString(b, k)
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
		return jsonvalue.AppendString(b, x), true
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
		if i = digits(s, i+1); i < 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i = digits(s, i); i < 0 {
			return false
		}
	}
	return i == len(s)
}

// digits returns the index after the run of decimal digits at s[i:], or -1 when there is none.
func digits(s string, i int) int {
	d := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == d {
		return -1
	}
	return i
}
