package pipeline

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Header names of the API and the middleware.
const (
	HeaderIdempotencyKey    = "Idempotency-Key"
	HeaderKeyRef            = "Idempotency-Key-Ref"
	HeaderReplayed          = "Idempotent-Replayed"
	HeaderCompletedAt       = "Idempotent-Completed-At"
	HeaderPrefer            = "Prefer"
	HeaderPreferenceApplied = "Preference-Applied"
	HeaderRetryAfter        = "Retry-After"
	HeaderLocation          = "Location"
	HeaderLastEventID       = "Last-Event-ID"
	HeaderStreamRestart     = "Idempotent-Stream-Restart"
	// HeaderExisting marks a 202 that joined a job already running (true).
	HeaderExisting = "Idempotent-Existing"
	// HeaderLink carries a 202's events link (rel="monitor", RFC 8288).
	HeaderLink = "Link"
	// HeaderForceNew asks for a forced run (idemguard.Call.ForceNew);
	// HeaderReplacesAttempt answers one with the attempt it replaced.
	HeaderForceNew        = "Idempotency-Force-New"
	HeaderReplacesAttempt = "Idempotent-Replaces-Attempt"
)

// parseForceNew reads Idempotency-Force-New: absent or "false" is no,
// "true" is yes (case-insensitive); anything else, or two headers, is refused.
func parseForceNew(h http.Header) (bool, error) {
	vs := h[HeaderForceNew] // the name is canonical: no Values
	switch {
	case len(vs) == 0:
		return false, nil
	case len(vs) == 1 && strings.EqualFold(strings.TrimSpace(vs[0]), "true"):
		return true, nil
	case len(vs) == 1 && strings.EqualFold(strings.TrimSpace(vs[0]), "false"):
		return false, nil
	}
	return false, Reject(ErrInvalidForceNew, `Idempotency-Force-New is "true" or "false", once`)
}

// PreferAsync is the preference of a background run (RFC 7240).
const PreferAsync = "respond-async"

// PrefersAsync reports whether the request carries Prefer: respond-async,
// among other preferences or not.
func PrefersAsync(hd http.Header) bool {
	for _, header := range hd[HeaderPrefer] { // the name is canonical: no Values
		for _, pref := range splitOutsideQuotes(header, ',') {
			pref, _, _ = cutOutsideQuotes(pref, ';')
			if strings.EqualFold(strings.Trim(pref, " \t"), PreferAsync) {
				return true
			}
		}
	}
	return false
}

// RetryAfterSeconds renders d as a Retry-After value: whole seconds,
// rounded up, at least 1.
func RetryAfterSeconds(d time.Duration) string {
	return fmt.Sprint(max(1, int64((d+time.Second-1)/time.Second)))
}

// eventIDPattern is the form of a streamed chunk's id: attempt, execution
// and sequence.
var eventIDPattern = regexp.MustCompile(`^[1-9][0-9]{0,8}-[0-9a-f]{8}-[0-9]{1,9}$`)

// parseLastEventID returns the Last-Event-ID of a request that resumes a
// stream ("" for none): the id of a chunk, "<attempt>-<execution>-<n>". One
// header, in that form, or the request is refused.
// lastEventIDKey is HeaderLastEventID in canonical form, as net/http and
// http.Header.Set store it.
var lastEventIDKey = http.CanonicalHeaderKey(HeaderLastEventID)

func parseLastEventID(h http.Header) (string, error) {
	vs := h[lastEventIDKey] // canonical: Values would canonicalize the name, allocating, on every request
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", Reject(ErrInvalidLastEventID, "more than one Last-Event-ID header")
	case !eventIDPattern.MatchString(vs[0]):
		return "", Reject(ErrInvalidLastEventID, `a Last-Event-ID of a stream is the id of one of its events, "<attempt>-<execution>-<n>" (e.g. 2-9f3c01ab-17)`)
	}
	return vs[0], nil
}

// parseIdempotencyKey returns the client key of h, "" when there is no
// Idempotency-Key header. The value is a bare token or an RFC 8941 sf-string
// ("abc") without parameters; either way it must then be 1–255 characters
// of [A-Za-z0-9_.:-] (keys.ValidateClientKey). Neither '"' nor '\' is such a
// character, so an sf-string needs no unescaping: any escape is invalid. A
// header present but empty is invalid, not absent; two headers (or one
// holding a comma-separated list) are invalid.
func parseIdempotencyKey(h http.Header) (string, error) {
	values := h[HeaderIdempotencyKey] // the name is canonical: no Values
	switch len(values) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", Reject(ErrDuplicateKey, "send exactly one Idempotency-Key header, not %d", len(values))
	}
	v := strings.Trim(values[0], " \t")
	if strings.HasPrefix(v, `"`) {
		if len(v) < 2 || !strings.HasSuffix(v, `"`) {
			return "", Reject(ErrInvalidKey, `an Idempotency-Key that starts with a double quote must be an RFC 8941 string ending with one, without parameters, e.g. "order-123"`)
		}
		v = v[1 : len(v)-1]
	}
	return clientKey(v, "Idempotency-Key", ", as a bare token or a quoted string")
}

// parsePreferWait returns the wait asked for by the first wait preference of
// the Prefer headers (RFC 7240: "wait=N", N whole seconds, the value a token
// or quoted string), capped at maxWait, and whether one was found with
// N > 0. Preferences the server cannot honour are ignored, as RFC 7240
// says: a malformed or negative wait means no wait.
func parsePreferWait(h http.Header, maxWait time.Duration) (time.Duration, bool) {
	value, found := preferWait(h)
	if !found || value == "" {
		return 0, false
	}
	return waitSeconds(value, maxWait)
}

// AsksWait reports whether the Prefer headers hold a wait preference,
// whatever its value: wait=0 asks not to wait.
func AsksWait(h http.Header) bool {
	_, found := preferWait(h)
	return found
}

// preferWait is the value of the first wait preference, unquoted ("" for
// none), and whether there is one (the first counts, RFC 7240 §2, valid
// or not).
func preferWait(h http.Header) (string, bool) {
	for _, header := range h[HeaderPrefer] {
		for _, pref := range splitOutsideQuotes(header, ',') {
			// A preference may carry parameters after ';'; wait has none.
			pref, _, _ = cutOutsideQuotes(pref, ';')
			name, value, hasValue := strings.Cut(pref, "=")
			if !strings.EqualFold(strings.Trim(name, " \t"), "wait") {
				continue
			}
			if !hasValue {
				return "", true
			}
			value = strings.Trim(value, " \t")
			if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
				value = value[1 : len(value)-1]
			}
			return value, true
		}
	}
	return "", false
}

// waitSeconds parses an RFC 7240 wait value (delta-seconds: digits only)
// and caps it at maxWait.
func waitSeconds(v string, maxWait time.Duration) (time.Duration, bool) {
	if v == "" || strings.Trim(v, "0123456789") != "" {
		return 0, false
	}
	v = strings.TrimLeft(v, "0")
	if v == "" {
		return 0, false // wait=0: do not wait
	}
	if len(v) > 9 { // over 31 years: surely more than the cap
		return maxWait, maxWait > 0
	}
	n, _ := strconv.ParseInt(v, 10, 64) // at most 9 digits: cannot fail
	if d := time.Duration(n) * time.Second; d < maxWait {
		return d, true
	}
	return maxWait, maxWait > 0
}

// splitOutsideQuotes splits s at sep, except inside double-quoted strings
// (with backslash escapes).
func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	for {
		head, tail, found := cutOutsideQuotes(s, sep)
		out = append(out, head)
		if !found {
			return out
		}
		s = tail
	}
}

func cutOutsideQuotes(s string, sep byte) (before, after string, found bool) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// PreferenceApplied renders the applied wait: whole seconds, rounded up.
func PreferenceApplied(wait time.Duration) string {
	return "wait=" + strconv.FormatInt(int64((wait+time.Second-1)/time.Second), 10)
}
