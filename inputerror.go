package idemguard

import (
	"cmp"
	"strings"
)

// FieldError is one part of an operation's inputs that does not fit the
// operation's schema.
type FieldError struct {
	// Pointer is the JSON Pointer (RFC 6901) of the part in the inputs, e.g.
	// "/messages/0/role"; "" is the inputs as a whole.
	Pointer string `json:"pointer"`
	// Detail says what is wrong, in a sentence that never quotes the
	// part's value (it may be a prompt).
	Detail string `json:"detail"`
}

// InputError is inputs that do not fit an operation's schema: a missing
// field, an unknown one, a value of the wrong type or out of range. An
// operation's validation returns it before anything is claimed, so nothing
// is stored or run and the key stays free for a corrected request; the REST
// API answers it 400, listing Fields.
type InputError struct {
	Fields []FieldError
}

func (e *InputError) Error() string {
	var b strings.Builder
	b.WriteString("idemguard: inputs do not fit the operation's schema")
	for i, f := range e.Fields {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(cmp.Or(f.Pointer, "(inputs)"))
		b.WriteString(": ")
		b.WriteString(f.Detail)
	}
	return b.String()
}
