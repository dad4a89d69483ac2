package routers

import (
	"bytes"
	"encoding/json"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

// A door's body is read without decoding it into values: pipeline.Read
// has checked that it is one valid JSON value, so a scan of its top-level
// members finds the model and the delivery members, and the inputs are the
// other members' bytes, as sent. The key and the fingerprint are derived
// from the canonical form of the inputs, so neither the members' order nor
// their spacing matters.

// decodeDoorBody reads the model and the delivery from body, a JSON
// object, and takes them out of the inputs.
func decodeDoorBody(body json.RawMessage) (doorBody, error) {
	s := scanner{b: body}
	s.space()
	if !s.eat('{') {
		return doorBody{}, pipeline.Reject(pipeline.ErrInvalidBody, "the body must be a JSON object")
	}
	var in doorBody
	var seen [len(doorMembers)]bool
	inputs := make([]byte, 0, len(body))
	inputs = append(inputs, '{')
	for s.space(); !s.eat('}'); s.space() {
		s.eat(',')
		s.space()
		start := s.i
		name := s.name()
		s.space()
		s.eat(':')
		s.space()
		vStart := s.i
		s.value()
		i := memberIndex(name)
		if i < 0 {
			if len(inputs) > 1 {
				inputs = append(inputs, ',')
			}
			inputs = append(inputs, body[start:s.i]...)
			continue
		}
		if seen[i] {
			return doorBody{}, pipeline.Reject(pipeline.ErrInvalidBody, "the body's %s member appears more than once", doorMembers[i])
		}
		seen[i] = true
		if err := in.set(i, bytes.TrimRight(body[vStart:s.i], " \t\r\n")); err != nil {
			return doorBody{}, err
		}
	}
	if in.model == "" {
		return doorBody{}, fieldError("/model", "must be a non-empty string")
	}
	in.inputs = append(inputs, '}')
	return in, nil
}

// set takes the value of doorMembers[i].
func (in *doorBody) set(i int, v []byte) error {
	switch doorMembers[i] {
	case "model":
		if len(v) < 2 || v[0] != '"' {
			return fieldError("/model", "must be a non-empty string")
		}
		if bytes.IndexByte(v, '\\') < 0 {
			in.model = string(v[1 : len(v)-1])
		} else if err := json.Unmarshal(v, &in.model); err != nil {
			return fieldError("/model", "must be a non-empty string")
		}
	case "stream":
		switch string(v) {
		case "true":
			in.stream = true
		case "false", "null":
		default:
			return fieldError("/stream", "must be true or false")
		}
	}
	return nil
}

func fieldError(ptr, detail string) error {
	return &idemguard.InputError{Fields: []idemguard.FieldError{{Pointer: ptr, Detail: detail}}}
}

// memberIndex is name's place in doorMembers, -1 if it is none of them. A
// name with an escape is decoded first, so that no spelling slips by.
func memberIndex(name []byte) int {
	raw := name[1 : len(name)-1]
	if bytes.IndexByte(raw, '\\') >= 0 {
		var n string
		_ = json.Unmarshal(name, &n)
		raw = []byte(n)
	}
	for i, m := range doorMembers {
		if string(raw) == m {
			return i
		}
	}
	return -1
}

// scanner walks a valid JSON text.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// name reads a string and returns it with its quotes.
func (s *scanner) name() []byte {
	start := s.i
	s.i++ // the opening quote
	for s.i < len(s.b) && s.b[s.i] != '"' {
		if s.b[s.i] == '\\' {
			s.i++
		}
		s.i++
	}
	s.i++
	return s.b[start:min(s.i, len(s.b))]
}

// value skips one value.
func (s *scanner) value() {
	depth := 0
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			s.name()
			if depth == 0 {
				return
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return
			}
			depth--
			if depth == 0 {
				s.i++
				return
			}
		case ',':
			if depth == 0 {
				return
			}
		}
		s.i++
	}
}
