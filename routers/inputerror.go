package routers

// Inputs that fail their operation's schema: a 400 naming the fields,
// answered before the guard claims the key.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/sanitize"
)

// maxListedFieldErrors caps the errors member of a 400: a body with a
// thousand bad messages need not be answered a thousand times.
const maxListedFieldErrors = 20

// inputCheck is the scope's Validate on the body as a Call.Check: the guard
// runs it only before it would claim the key (a replay does not pay for
// it), and its *idemguard.InputError is answered 400. nil without Validate.
func inputCheck(s *Scope, body json.RawMessage) func() error {
	if s.Validate == nil {
		return nil
	}
	return func() error {
		err := s.Validate(body)
		if err == nil {
			return nil
		}
		var ie *idemguard.InputError
		if !errors.As(err, &ie) || len(ie.Fields) == 0 {
			// The validator's own text may quote the body: not shown.
			ie = &idemguard.InputError{Fields: []idemguard.FieldError{{Detail: "does not fit the operation's schema"}}}
		}
		return ie
	}
}

// inputProblem is the 400 of an *idemguard.InputError: its detail names
// the first field, its errors member lists them all (RFC 9457 §3.2
// extension member, one {pointer, detail} per field).
func inputProblem(ie *idemguard.InputError) problem {
	fields := ie.Fields[:min(len(ie.Fields), maxListedFieldErrors)]
	first := fields[0]
	where := "the body"
	if first.Pointer != "" {
		where = first.Pointer
	}
	detail := fmt.Sprintf("the inputs do not fit the operation's schema: %s %s", where, first.Detail)
	if n := len(ie.Fields) - 1; n > 0 {
		detail += fmt.Sprintf(" (and %d more; see errors)", n)
	}
	p := newProblem(http.StatusBadRequest, "invalid-input", "Invalid input", sanitize.InvalidInput, detail)
	p.Errors = fields
	return p
}
