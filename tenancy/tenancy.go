package tenancy

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/idemguard/idemguard/internal/ctxkeys"
)

// MaxIDLen is the longest tenant ID, in characters (bytes: every allowed
// character is ASCII).
const MaxIDLen = 64

// ErrInvalidID is wrapped by every error of [ParseID].
var ErrInvalidID = errors.New("tenancy: invalid tenant id")

// ID is a validated tenant identifier. Obtain one with [ParseID]; a
// conversion such as ID("x") bypasses validation.
type ID string

// idChars marks the bytes allowed in an ID: [A-Za-z0-9._-].
var idChars = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	t['.'], t['_'], t['-'] = true, true, true
	return t
}()

// ParseID validates s as a tenant ID: 1 to 64 characters of [A-Za-z0-9._-].
// It never truncates or normalises s. The error wraps [ErrInvalidID], says
// why s is invalid, and quotes at most the first 64 bytes of s. ParseID does
// not allocate when s is valid.
func ParseID(s string) (ID, error) {
	if len(s) == 0 || len(s) > MaxIDLen {
		return "", parseError(s, -1)
	}
	if i := invalidAt(s); i >= 0 {
		return "", parseError(s, i)
	}
	return ID(s), nil
}

// invalidAt returns the byte offset of the first byte of s that is not
// allowed in an ID, or -1.
func invalidAt(s string) int {
	for i := 0; i < len(s); i++ {
		if !idChars[s[i]] {
			return i
		}
	}
	return -1
}

// parseError explains why s (with its first bad byte at offset bad, or -1)
// is not a valid ID. It is off the happy path, so it may allocate.
func parseError(s string, bad int) error {
	switch {
	case len(s) == 0:
		return fmt.Errorf("%w: empty; a tenant id is 1 to %d characters of [A-Za-z0-9._-]", ErrInvalidID, MaxIDLen)
	case len(s) > MaxIDLen:
		return fmt.Errorf("%w: %d bytes long, at most %d allowed (never truncated): %q…", ErrInvalidID, len(s), MaxIDLen, s[:MaxIDLen])
	}
	r, size := utf8.DecodeRuneInString(s[bad:])
	what := fmt.Sprintf("%q (U+%04X)", r, r)
	if r == utf8.RuneError && size <= 1 {
		what = fmt.Sprintf("byte 0x%02X (invalid UTF-8)", s[bad])
	}
	return fmt.Errorf("%w: character %s at position %d (0-based byte offset) is not one of [A-Za-z0-9._-]: %q", ErrInvalidID, what, bad, s)
}

// Valid reports whether id would be accepted by [ParseID].
func (id ID) Valid() bool {
	return len(id) > 0 && len(id) <= MaxIDLen && invalidAt(string(id)) < 0
}

// String returns the ID as it was parsed.
func (id ID) String() string { return string(id) }

// ctxKey is ctxkeys.Tenant, which an entry path may also set (together
// with the audit actor) through a ctxkeys.Caller.
type ctxKey = ctxkeys.Tenant

// WithTenant returns a copy of ctx carrying the tenant id.
func WithTenant(ctx context.Context, id ID) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// FromContext returns the tenant carried by ctx. It reports false when ctx
// carries no tenant or the carried ID is not valid (e.g. an unvalidated
// conversion), so an empty or malformed tenant never reaches storage.
func FromContext(ctx context.Context) (ID, bool) {
	id, ok := ctx.Value(ctxKey{}).(ID)
	if !ok || !id.Valid() {
		return "", false
	}
	return id, true
}
