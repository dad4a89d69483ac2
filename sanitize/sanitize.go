package sanitize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/idemguard/idemguard/internal/jsonvalue"
)

// Limits applied while sanitizing.
const (
	// MaxActionRequestIDs is the most createdActionRequestIds kept; later
	// entries are dropped.
	MaxActionRequestIDs = 1000
	// MaxTraceIDBytes is the longest traceId kept; a longer one is cut at a
	// UTF-8 boundary.
	MaxTraceIDBytes = 256
)

// Envelope is the only shape ever stored or replayed. Its JSON field order is
// the struct order. Data holds only the values a sanitized envelope may hold:
// string, bool, nil, [json.Number] (canonical) and []any of those.
type Envelope struct {
	OK                      bool           `json:"ok"`
	StopReason              StopReason     `json:"stopReason"`
	CreatedActionRequestIDs []int64        `json:"createdActionRequestIds,omitempty"`
	TraceID                 string         `json:"traceId,omitempty"`
	NeedsHuman              bool           `json:"needsHuman"`
	Cached                  bool           `json:"cached"`
	Data                    map[string]any `json:"data,omitempty"`
}

// ErrNotObject is returned (wrapped) by [FromJSON] when the input is valid
// JSON whose top level is not an object.
var ErrNotObject = errors.New("sanitize: top-level JSON value is not an object")

// blockedKeys are never stored, at any depth (compared with strings.EqualFold).
var blockedKeys = [...]string{
	"_internal", "debug", "prompt", "systemPrompt", "error", "stack",
	"provider", "model", "requestId",
}

// BlockedKeys returns the keys that are never stored, at any depth, compared
// case-insensitively.
func BlockedKeys() []string { return append([]string(nil), blockedKeys[:]...) }

// IsBlockedKey reports whether k equals, case-insensitively, a blocked key.
func IsBlockedKey(k string) bool {
	// An ASCII key folds only to a key of its own length (the blocked keys
	// are ASCII); another may be shorter or longer ("ſtack" is "stack").
	ascii := true
	for i := 0; i < len(k) && ascii; i++ {
		ascii = k[i] < utf8.RuneSelf
	}
	for _, b := range blockedKeys {
		if (!ascii || len(k) == len(b)) && strings.EqualFold(k, b) {
			return true
		}
	}
	return false
}

// Failure returns the envelope stored for a failed operation:
// {ok:false, stopReason:reason}; a reason outside the enum becomes [Unknown].
func Failure(reason StopReason) Envelope {
	return Envelope{OK: false, StopReason: ParseStopReason(string(reason))}
}

// FromValue sanitizes v's encoding/json encoding as [FromJSON] does. Maps,
// slices, strings, integers and envelopes are converted directly, without
// the encoding round trip, to exactly what it would decode to; other values
// are marshalled. A []byte or [json.RawMessage] is taken to hold JSON already.
// An [Envelope] or *Envelope is sanitized too, so a hand-built envelope never
// bypasses the allowlist.
func FromValue(v any) (Envelope, error) {
	top, err := objectOf(v)
	if err != nil {
		return Envelope{}, err
	}
	return fromObject(top), nil
}

// objectOf is the decoded top-level object of v's JSON encoding: converted
// directly where genericOf can, else encoded and decoded.
func objectOf(v any) (map[string]any, error) {
	if g, ok := genericOf(v, 0); ok {
		top, isObject := g.(map[string]any)
		if !isObject {
			return nil, ErrNotObject
		}
		return top, nil
	}
	b, err := valueJSON(v)
	if err != nil {
		return nil, err
	}
	return decodeObject(b)
}

// valueJSON is the JSON FromValue sanitizes.
func valueJSON(v any) ([]byte, error) {
	switch x := v.(type) {
	case json.RawMessage:
		return x, nil
	case []byte:
		return x, nil
	case Envelope:
		return Marshal(x) // the same document as json.Marshal, without reflection
	case *Envelope:
		if x != nil {
			return Marshal(*x)
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("sanitize: marshal %T: %w", v, err)
	}
	return b, nil
}

// FromJSON sanitizes b, an operation's result, into an [Envelope] (see the
// package documentation for the rules). It fails only when b is not valid
// JSON or its top level is not an object ([ErrNotObject]).
func FromJSON(b []byte) (Envelope, error) {
	top, err := decodeObject(b)
	if err != nil {
		return Envelope{}, err
	}
	return fromObject(top), nil
}

// fromObject builds the envelope of a decoded top-level object.
func fromObject(top map[string]any) Envelope {
	return fromMembers(top["ok"], top["stopReason"], top["needsHuman"], top["traceId"],
		top["createdActionRequestIds"], top["data"])
}

// fromMembers builds the envelope of a decoded top-level object's members
// (nil: absent); data, when an object, is sanitized in place.
func fromMembers(ok, stopReason, needsHuman, traceID, ids, data any) Envelope {
	e := Envelope{OK: true}
	if v, isBool := ok.(bool); isBool {
		e.OK = v
	}
	e.StopReason = Completed
	if !e.OK {
		e.StopReason = Unknown
	}
	if s, isString := stopReason.(string); isString && s != "" {
		e.StopReason = ParseStopReason(s)
	}
	if v, isBool := needsHuman.(bool); isBool {
		e.NeedsHuman = v
	}
	if s, isString := traceID.(string); isString {
		e.TraceID = truncateUTF8(s, MaxTraceIDBytes)
	}
	if arr, isArray := ids.([]any); isArray {
		e.CreatedActionRequestIDs = sanitizeIDs(arr)
	}
	if obj, isObject := data.(map[string]any); isObject {
		e.Data = sanitizeData(obj)
	}
	return e
}

// decodeObject decodes b, which must hold exactly one JSON object, keeping
// numbers as written.
func decodeObject(b []byte) (map[string]any, error) {
	// The fast path decodes what encoding/json would, or declines.
	if v, ok := jsonvalue.Decode(b); ok {
		top, isObject := v.(map[string]any)
		if !isObject {
			return nil, ErrNotObject
		}
		return top, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("sanitize: invalid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("more than one top-level value")
		}
		return nil, fmt.Errorf("sanitize: invalid JSON: %w", err)
	}
	top, ok := v.(map[string]any)
	if !ok {
		return nil, ErrNotObject
	}
	return top, nil
}

// sanitizeIDs keeps the numbers of arr with an integral value fitting int64,
// at most MaxActionRequestIDs of them.
func sanitizeIDs(arr []any) []int64 {
	var ids []int64
	for _, el := range arr {
		if len(ids) == MaxActionRequestIDs {
			break
		}
		n, ok := el.(json.Number)
		if !ok {
			continue
		}
		c, ok := CanonicalNumber(string(n))
		if !ok {
			continue
		}
		if id, err := strconv.ParseInt(string(c), 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// sanitizeData keeps the members of obj whose key is not blocked and whose
// value is a primitive or an array (of which only primitives are kept). It
// returns nil when nothing is kept. obj was freshly decoded and belongs to
// the caller alone, so it is filtered in place (no second map).
func sanitizeData(obj map[string]any) map[string]any {
	for k, v := range obj {
		if IsBlockedKey(k) {
			delete(obj, k)
			continue
		}
		if arr, ok := v.([]any); ok {
			kept := arr[:0]
			for _, el := range arr {
				if p, ok := primitive(el); ok {
					kept = append(kept, p)
				}
			}
			clear(arr[len(kept):])
			obj[k] = kept
		} else if p, ok := primitive(v); ok {
			obj[k] = p
		} else {
			delete(obj, k)
		}
	}
	if len(obj) == 0 {
		return nil
	}
	return obj
}

// primitive returns v when it is a string, bool or nil, and the canonical
// form of a number; objects, arrays and overflowing numbers are not kept.
func primitive(v any) (any, bool) {
	switch x := v.(type) {
	case nil, string, bool:
		return x, true
	case json.Number:
		c, ok := CanonicalNumber(string(x))
		if ok && c == x {
			return v, true // already canonical: v as it is, not boxed again
		}
		return c, ok
	}
	return nil, false
}

// CanonicalNumber renders the JSON number literal s canonically: an integer
// literal (no '.', 'e' or 'E') that fits int64 keeps its digits ("-0" → "0");
// any other number is parsed as float64 and rendered with
// strconv.FormatFloat(f, 'g', -1, 64), or as integer digits when the value is
// integral and fits int64. It reports false when s is not a number or
// overflows float64 (such a value is dropped). CanonicalNumber is idempotent.
func CanonicalNumber(s string) (json.Number, bool) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			var buf [24]byte
			if c := strconv.AppendInt(buf[:0], i, 10); string(c) != s {
				return json.Number(c), true
			}
			return json.Number(s), true // already canonical: no copy
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", false
	}
	// -2^63 and 2^63 are exact float64 values; int64 holds [-2^63, 2^63).
	if f == math.Trunc(f) && f >= -(1<<63) && f < 1<<63 {
		return json.Number(strconv.FormatInt(int64(f), 10)), true
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), true
}

// truncateUTF8 cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
