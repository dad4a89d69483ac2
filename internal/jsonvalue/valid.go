package jsonvalue

import (
	"encoding/json"
	"unicode/utf8"
)

// Valid is json.Valid(b), in one pass without encoding/json's scanner for
// the documents SurelyValid takes.
func Valid(b []byte) bool {
	return utf8.Valid(b) && SurelyValid(b) || json.Valid(b)
}

// SurelyValid is a fast path of json.Valid for the bodies clients send: a
// single pass over raw, without encoding/json's scanner (a function call
// per byte), that reports true only for one JSON value (RFC 8259, as
// encoding/json accepts it) nested at most maxFastDepth deep. It reports
// false for anything else, and the caller then decides with encoding/json,
// so its errors and the bodies it accepts stay encoding/json's. raw must
// hold valid UTF-8 (checked first), so bytes over 0x7f need no look here.
func SurelyValid(raw []byte) bool {
	var stack [maxFastDepth]byte // the open containers: '{' or '['
	depth, i := 0, skipWS(raw, 0)
	for {
		// A value starts at i.
		if i >= len(raw) {
			return false
		}
		if c := raw[i]; c == '{' || c == '[' {
			if depth == maxFastDepth {
				return false
			}
			stack[depth] = c
			depth++
			i = skipWS(raw, i+1)
			if i >= len(raw) || raw[i] != c+2 { // '}' is '{'+2, ']' is '['+2
				if c == '{' {
					if i = memberName(raw, i); i < 0 {
						return false
					}
				}
				continue
			}
			depth--
			i++
		} else if i = skipScalar(raw, i); i < 0 {
			return false
		}
		var end bool
		if i, depth, end = afterValue(raw, i, stack[:depth]); end {
			return i == len(raw)
		} else if i < 0 {
			return false
		}
	}
}

// skipScalar skips the string, number or literal that starts at i; -1
// when none does.
func skipScalar(raw []byte, i int) int {
	switch c := raw[i]; {
	case c == '"':
		return skipString(raw, i)
	case c == '-' || c >= '0' && c <= '9':
		return skipNumber(raw, i)
	case c == 't' && hasAt(raw, i, "true"):
		return i + 4
	case c == 'f' && hasAt(raw, i, "false"):
		return i + 5
	case c == 'n' && hasAt(raw, i, "null"):
		return i + 4
	}
	return -1
}

// afterValue skips what follows a value ending at i inside the open
// containers: closing brackets, then a comma (and, in an object, the next
// member's name), and returns where the next value starts and how many
// containers are still open. end is true when none is open any more (i is
// then the end of the white space after the last value); i is -1 when
// what follows is not JSON.
func afterValue(raw []byte, i int, open []byte) (next, depth int, end bool) {
	for {
		i = skipWS(raw, i)
		if len(open) == 0 {
			return i, 0, true
		}
		if i >= len(raw) {
			return -1, 0, false
		}
		top := open[len(open)-1]
		if raw[i] == top+2 {
			open = open[:len(open)-1]
			i++
			continue
		}
		if raw[i] != ',' {
			return -1, 0, false
		}
		i = skipWS(raw, i+1)
		if top == '{' {
			if i = memberName(raw, i); i < 0 {
				return -1, 0, false
			}
		}
		return i, len(open), false
	}
}

// maxFastDepth is the deepest nesting SurelyValid takes on itself.
const maxFastDepth = 64

// memberName skips an object member's name, the colon and the white
// space after it from i; -1 when they are not there.
func memberName(raw []byte, i int) int {
	if i >= len(raw) || raw[i] != '"' {
		return -1
	}
	if i = skipString(raw, i); i < 0 {
		return -1
	}
	i = skipWS(raw, i)
	if i >= len(raw) || raw[i] != ':' {
		return -1
	}
	return skipWS(raw, i+1)
}

func skipWS(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

func hasAt(raw []byte, i int, lit string) bool {
	return len(raw)-i >= len(lit) && string(raw[i:i+len(lit)]) == lit
}

// skipString skips the string that starts at raw[i] ('"'); -1 when it is
// not one: unterminated, a control character, or an escape JSON has not.
func skipString(raw []byte, i int) int {
	for i++; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			i++
			if i >= len(raw) {
				return -1
			}
			switch raw[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(raw)-i <= 4 || !isHex(raw[i+1]) || !isHex(raw[i+2]) || !isHex(raw[i+3]) || !isHex(raw[i+4]) {
					return -1
				}
				i += 4
			default:
				return -1
			}
		}
	}
	return -1
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// skipNumber skips the number that starts at raw[i]; -1 when it is not
// one: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func skipNumber(raw []byte, i int) int {
	if raw[i] == '-' {
		i++
	}
	switch {
	case i < len(raw) && raw[i] == '0':
		i++
	case i < len(raw) && raw[i] >= '1' && raw[i] <= '9':
		i = skipDigits(raw, i)
	default:
		return -1
	}
	if i < len(raw) && raw[i] == '.' {
		if j := skipDigits(raw, i+1); j > i+1 {
			i = j
		} else {
			return -1
		}
	}
	if i < len(raw) && (raw[i] == 'e' || raw[i] == 'E') {
		i++
		if i < len(raw) && (raw[i] == '+' || raw[i] == '-') {
			i++
		}
		if j := skipDigits(raw, i); j > i {
			i = j
		} else {
			return -1
		}
	}
	return i
}

func skipDigits(raw []byte, i int) int {
	for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
		i++
	}
	return i
}
