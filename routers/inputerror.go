package routers

// Inputs that fail their operation's schema: a 400 naming the fields,
// answered before the guard claims the key.

import (
	"encoding/json"
	"errors"

	"github.com/idemguard/idemguard"
)

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
