package jsonvalue

import (
	"bytes"
	"slices"
	"unicode/utf8"
)

// AppendCanonical appends to dst the canonical form of the JSON document b,
// as internal/keys defines it (keys.Canonicalize): object members sorted by
// name (byte order; of a repeated name the last one counts, as encoding/json
// decodes it), numbers as written, strings as AppendString encodes them, no
// white space. It builds no maps: each object's members are canonicalized
// in place at the end of dst, then reordered. ok is false for every
// document Decode declines; the caller then uses its general path.
func AppendCanonical(dst, b []byte) ([]byte, bool) {
	d := decoder{b: b}
	d.skipSpace()
	dst, ok := d.canonical(dst, 0)
	if !ok {
		return nil, false
	}
	d.skipSpace()
	if d.i != len(d.b) {
		return nil, false
	}
	return dst, true
}

// TakeCanonical is, for a JSON object b that DecodeUniqueKeys accepts,
// the canonical form (AppendCanonical) of b without its members named in
// names, and the canonical form of each of those members' values
// (taken[i] is names[i]'s; nil when absent). The canonical form of such an
// object is what encoding/json (HTML escaping off) encodes of the map
// DecodeUniqueKeys decodes, so this is that decoding, the members deleted
// and the map encoded, without the map. ok is false, and nothing else is
// returned, when b is not an object or DecodeUniqueKeys declines it.
func TakeCanonical(b []byte, names ...string) (rest []byte, taken [][]byte, ok bool) {
	d := decoder{b: b, unique: true, omit: names}
	d.skipSpace()
	if d.i >= len(d.b) || d.b[d.i] != '{' {
		return nil, nil, false
	}
	// The canonical form is at most about as long as b: one buffer holds
	// it and the values' scratch copy (each grows apart if it must).
	n := len(b) + 16
	buf := make([]byte, 0, 2*n)
	d.scratch, d.taken = buf[n:n:2*n], make([][]byte, len(names))
	rest, ok = d.canonicalObject(buf[:0:n], 0)
	if !ok {
		return nil, nil, false
	}
	d.skipSpace()
	if d.i != len(d.b) {
		return nil, nil, false
	}
	return rest, d.taken, true
}

func (d *decoder) canonical(dst []byte, depth int) ([]byte, bool) {
	if d.i >= len(d.b) || depth > MaxDepth {
		return dst, false
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.canonicalObject(dst, depth)
	case c == '[':
		return d.canonicalArray(dst, depth)
	case c == '"':
		if end := d.plainString(); end > 0 {
			dst = append(dst, d.b[d.i:end]...)
			d.i = end
			return dst, true
		}
		s, ok := d.strBytes()
		return appendString(dst, s, false), ok
	case c == 't':
		return append(dst, "true"...), d.literal("true")
	case c == 'f':
		return append(dst, "false"...), d.literal("false")
	case c == 'n':
		return append(dst, "null"...), d.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		start := d.i
		if !d.scanNumber() {
			return dst, false
		}
		return append(dst, d.b[start:d.i]...), true
	}
	return dst, false
}

// plainString returns the end of the string at d.i (its opening quote)
// when it holds printable ASCII and no escape, else 0. Such a string's text
// is its canonical form: AppendString would write it back unchanged.
func (d *decoder) plainString() int {
	for i := d.i + 1; i < len(d.b); i++ {
		switch c := d.b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20 || c >= utf8.RuneSelf || c == '\\':
			return 0
		}
	}
	return 0
}

func (d *decoder) canonicalArray(dst []byte, depth int) ([]byte, bool) {
	dst = append(dst, '[')
	if d.open(']') {
		return append(dst, ']'), true
	}
	for n := 0; ; n++ {
		if n > 0 {
			dst = append(dst, ',')
		}
		var ok bool
		if dst, ok = d.canonical(dst, depth+1); !ok {
			return dst, false
		}
		if more, ok := d.more(']'); !more {
			return append(dst, ']'), ok
		}
	}
}

// took reports whether name is one of the members TakeCanonical takes out,
// and keeps its value (a slice of the scratch buffer, which no later object
// reuses: the top-level object is the last one copied there).
func (d *decoder) took(name, value []byte) bool {
	for i, n := range d.omit {
		if string(name) == n {
			d.taken[i] = value
			return true
		}
	}
	return false
}

// member is one object member: its name and where its canonical value
// lies, relative to the object's start in dst.
type member struct {
	name       []byte // the decoded name (strBytes)
	start, end int
}

func (d *decoder) canonicalObject(dst []byte, depth int) ([]byte, bool) {
	if d.open('}') {
		return append(dst, "{}"...), true
	}
	base := len(dst)
	var arr [8]member
	members := arr[:0]
	for {
		name, ok := d.memberNameBytes()
		if !ok {
			return dst, false
		}
		start := len(dst) - base
		if dst, ok = d.canonical(dst, depth+1); !ok {
			return dst, false
		}
		members = append(members, member{name: name, start: start, end: len(dst) - base})
		more, ok := d.more('}')
		if !ok {
			return dst, false
		}
		if !more {
			break
		}
	}
	// Sorted by name, a repeated name's members in input order: the last
	// of each run is the one encoding/json keeps.
	slices.SortStableFunc(members, func(a, b member) int { return bytes.Compare(a.name, b.name) })
	// The values, copied aside to be put back in order. One buffer serves
	// every object of the document: an object's members are all
	// canonicalized (nested objects done) before it is copied. It starts
	// with the document's length, room for the usual documents' objects:
	// one allocation, not one for each larger object.
	if d.scratch == nil {
		d.scratch = make([]byte, 0, max(len(dst)-base, min(len(d.b), 64<<10)))
	}
	d.scratch = append(d.scratch[:0], dst[base:]...)
	values := d.scratch
	dst = append(dst[:base], '{')
	first := true
	for i, m := range members {
		if i+1 < len(members) && bytes.Equal(members[i+1].name, m.name) {
			if d.unique {
				return dst, false
			}
			continue
		}
		if depth == 0 && d.took(m.name, values[m.start:m.end]) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendString(dst, m.name, false)
		dst = append(dst, ':')
		dst = append(dst, values[m.start:m.end]...)
	}
	return append(dst, '}'), true
}
