// Package jsonvalue decodes one JSON document into the generic values
// encoding/json produces with Decoder.UseNumber: map[string]any, []any,
// string, json.Number, bool and nil. It exists for speed: the request path
// decodes small documents (operation inputs, stored envelopes) several times
// per request, and encoding/json's Decoder allocates a reader buffer, a
// scanner and reflection state for each.
//
// Decode is a fast path, not a replacement: it reports ok=false for anything
// it does not handle exactly as encoding/json would (invalid JSON of any
// kind, invalid UTF-8, a lone UTF-16 surrogate escape, nesting deeper than
// MaxDepth), and the caller then decodes with encoding/json, which produces
// the value or the error. For every input it accepts, the value equals
// encoding/json's (FuzzDecodeMatchesEncodingJSON checks this).
package jsonvalue

import (
	"encoding/json"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting Decode handles itself.
const MaxDepth = 64

// Decode decodes b, which must hold exactly one JSON value surrounded by
// optional white space. ok is false when b is not handled (see the package
// documentation): decode it with encoding/json instead.
func Decode(b []byte) (v any, ok bool) {
	return decode(decoder{b: b})
}

// DecodeUniqueKeys is Decode that also declines a document in which an
// object repeats a member name. Decoding into a struct, encoding/json merges
// a repeated member into what the first one decoded (a repeated array of
// objects keeps the fields the second one omits), which a map of generic
// values cannot show; a caller that maps the generic values onto a struct
// uses this, and leaves such documents to encoding/json.
func DecodeUniqueKeys(b []byte) (v any, ok bool) {
	return decode(decoder{b: b, unique: true})
}

func decode(d decoder) (v any, ok bool) {
	d.skipSpace()
	v, ok = d.value(0)
	if !ok {
		return nil, false
	}
	d.skipSpace()
	if d.i != len(d.b) {
		return nil, false
	}
	return v, true
}

type decoder struct {
	b       []byte
	i       int
	unique  bool     // decline repeated member names
	scratch []byte   // AppendCanonical's copy of an object's values
	omit    []string // TakeCanonical's names, taken out of the top-level object
	taken   [][]byte // their canonical values
}

func (d *decoder) skipSpace() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) value(depth int) (any, bool) {
	if d.i >= len(d.b) || depth > MaxDepth {
		return nil, false
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		s, ok := d.str()
		return s, ok
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	}
	return nil, false
}

func (d *decoder) literal(lit string) bool {
	if len(d.b)-d.i < len(lit) || string(d.b[d.i:d.i+len(lit)]) != lit {
		return false
	}
	d.i += len(lit)
	return true
}

func (d *decoder) object(depth int) (any, bool) {
	m := map[string]any{}
	if d.open('}') {
		return m, true
	}
	for {
		k, ok := d.memberName()
		if !ok {
			return nil, false
		}
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		if d.unique {
			if _, dup := m[k]; dup {
				return nil, false
			}
		}
		m[k] = v // a repeated key: the last one wins, as in encoding/json
		if more, ok := d.more('}'); !more {
			return m, ok
		}
	}
}

// open steps over an array's or object's opening bracket and the space after it, and over
// close too when the value is empty (reporting true).
func (d *decoder) open(close byte) bool {
	d.i++
	d.skipSpace()
	if d.i < len(d.b) && d.b[d.i] == close {
		d.i++
		return true
	}
	return false
}

// memberName reads an object member's `"name":` and the space around the colon.
func (d *decoder) memberName() (string, bool) {
	name, ok := d.memberNameBytes()
	return string(name), ok
}

// memberNameBytes is memberName with the name as strBytes gives it.
func (d *decoder) memberNameBytes() ([]byte, bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return nil, false
	}
	name, ok := d.strBytes()
	if !ok {
		return nil, false
	}
	d.skipSpace()
	if d.i >= len(d.b) || d.b[d.i] != ':' {
		return nil, false
	}
	d.i++
	d.skipSpace()
	return name, true
}

// more reads what follows an element: a comma, and more elements follow (true); or close, the
// end of the value (false, ok). Anything else is not JSON (false, false).
func (d *decoder) more(close byte) (more, ok bool) {
	d.skipSpace()
	if d.i >= len(d.b) {
		return false, false
	}
	switch d.b[d.i] {
	case ',':
		d.i++
		d.skipSpace()
		return true, true
	case close:
		d.i++
		return false, true
	}
	return false, false
}

func (d *decoder) array(depth int) (any, bool) {
	a := []any{}
	if d.open(']') {
		return a, true
	}
	for {
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		a = append(a, v)
		if more, ok := d.more(']'); !more {
			return a, ok
		}
	}
}

// str decodes the string starting at the opening quote.
func (d *decoder) str() (string, bool) {
	b, ok := d.strBytes()
	return string(b), ok
}

// strBytes is str as bytes: a slice of the document when the string holds
// no escape (nothing copied), a new slice otherwise. The caller must not
// modify it.
func (d *decoder) strBytes() ([]byte, bool) {
	d.i++ // "
	start := d.i
	// The common case: no escapes, ASCII or valid UTF-8.
	var high byte // every byte ORed: ASCII only when below 0x80
	for d.i < len(d.b) {
		c := d.b[d.i]
		high |= c
		switch {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			if high >= utf8.RuneSelf && !utf8.Valid(s) {
				return nil, false // encoding/json would substitute U+FFFD
			}
			return s, true
		case c == '\\':
			return d.strEscaped(start)
		case c < 0x20:
			return nil, false
		}
		d.i++
	}
	return nil, false
}

func (d *decoder) strEscaped(start int) ([]byte, bool) {
	out := make([]byte, 0, d.i-start+16)
	out = append(out, d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			if !utf8.Valid(out) {
				return nil, false
			}
			return out, true
		case c < 0x20:
			return nil, false
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		// An escape.
		if d.i+1 >= len(d.b) {
			return nil, false
		}
		e := d.b[d.i+1]
		d.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return nil, false
			}
			if utf16.IsSurrogate(r) {
				// Only a valid pair is handled; encoding/json turns a
				// lone surrogate into U+FFFD.
				if d.i+1 >= len(d.b) || d.b[d.i] != '\\' || d.b[d.i+1] != 'u' {
					return nil, false
				}
				d.i += 2
				r2, ok := d.hex4()
				if !ok {
					return nil, false
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return nil, false
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, false
		}
	}
	return nil, false
}

func (d *decoder) hex4() (rune, bool) {
	if len(d.b)-d.i < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(d.b[d.i:d.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	d.i += 4
	return rune(n), true
}

// number scans a JSON number (RFC 8259 grammar) and keeps its literal.
func (d *decoder) number() (any, bool) {
	start := d.i
	if !d.scanNumber() {
		return nil, false
	}
	return json.Number(d.b[start:d.i]), true
}

// scanNumber consumes a JSON number and reports whether there was one.
func (d *decoder) scanNumber() bool {
	if d.b[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.b) && d.b[d.i] == '0':
		d.i++
	case d.i < len(d.b) && d.b[d.i] >= '1' && d.b[d.i] <= '9':
		d.digits()
	default:
		return false
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if !d.digits() {
			return false
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if !d.digits() {
			return false
		}
	}
	return true
}

// digits consumes one or more digits and reports whether there was one.
func (d *decoder) digits() bool {
	start := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}
