package sanitize

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// maxDirectDepth is the deepest nesting genericOf converts; deeper values
// (and cycles, which json.Marshal reports as an error) take the
// json.Marshal path.
const maxDirectDepth = 32

// genericOf returns what decoding json.Marshal(v) with UseNumber gives, for
// the values it can convert without encoding them: nil, bool, valid UTF-8
// strings, valid json.Numbers, Go integers, map[string]any and []any of
// those, and an Envelope (or *Envelope) whose data holds those. Maps and slices are copied, never shared with v (sanitizing
// filters the decoded data object in place). ok is false for anything else
// (floats, whose text json.Marshal chooses; structs; invalid UTF-8, which
// json.Marshal replaces byte by byte; too deep a nesting): FromValue then
// marshals v as before. TestGenericOfMatchesMarshal and FuzzGenericOf hold
// the two equal.
func genericOf(v any, depth int) (any, bool) {
	switch x := v.(type) {
	case nil, bool:
		return x, true
	case string: // v itself: boxing x again would allocate a copy of v
		return v, utf8.ValidString(x)
	case json.Number:
		return v, validNumber(string(x)) // json.Marshal writes "" as 0
	case int:
		return json.Number(strconv.FormatInt(int64(x), 10)), true
	case int64:
		return json.Number(strconv.FormatInt(x, 10)), true
	case int32:
		return json.Number(strconv.FormatInt(int64(x), 10)), true
	case uint64:
		return json.Number(strconv.FormatUint(x, 10)), true
	case uint:
		return json.Number(strconv.FormatUint(uint64(x), 10)), true
	case map[string]any:
		if x == nil {
			return nil, true // null
		}
		if depth >= maxDirectDepth {
			return nil, false
		}
		m := make(map[string]any, len(x))
		for k, e := range x {
			if !utf8.ValidString(k) {
				return nil, false
			}
			g, ok := genericOf(e, depth+1)
			if !ok {
				return nil, false
			}
			m[k] = g
		}
		return m, true
	case Envelope:
		return envelopeObject(x, depth)
	case *Envelope:
		if x == nil {
			return nil, true // null
		}
		return envelopeObject(*x, depth)
	case []any:
		if x == nil {
			return nil, true // null
		}
		if depth >= maxDirectDepth {
			return nil, false
		}
		a := make([]any, len(x))
		for i, e := range x {
			g, ok := genericOf(e, depth+1)
			if !ok {
				return nil, false
			}
			a[i] = g
		}
		return a, true
	}
	return nil, false
}

// envelopeObject is the object json.Marshal(e) encodes, by its struct tags.
func envelopeObject(e Envelope, depth int) (any, bool) {
	if !utf8.ValidString(string(e.StopReason)) || !utf8.ValidString(e.TraceID) {
		return nil, false
	}
	m := make(map[string]any, 7)
	m["ok"], m["stopReason"], m["needsHuman"], m["cached"] = e.OK, string(e.StopReason), e.NeedsHuman, e.Cached
	if len(e.CreatedActionRequestIDs) > 0 {
		m["createdActionRequestIds"] = idValues(e.CreatedActionRequestIDs)
	}
	if e.TraceID != "" {
		m["traceId"] = e.TraceID
	}
	if len(e.Data) > 0 {
		data, ok := genericOf(e.Data, depth+1)
		if !ok {
			return nil, false
		}
		m["data"] = data
	}
	return m, true
}

// idValues are ids as json.Marshal encodes them, decoded with UseNumber.
func idValues(ids []int64) []any {
	a := make([]any, len(ids))
	for i, id := range ids {
		a[i] = json.Number(strconv.FormatInt(id, 10))
	}
	return a
}
