package jsonvalue

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// safeASCII[c] is whether AppendString writes the byte c as it is (c below
// utf8.RuneSelf); htmlSafeASCII is the same for AppendHTMLString.
var safeASCII, htmlSafeASCII = func() (plain, html [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		plain[c] = c != '"' && c != '\\'
		html[c] = plain[c] && c != '<' && c != '>' && c != '&'
	}
	return plain, html
}()

// AppendString appends s as a JSON string, exactly as encoding/json encodes
// it with HTML escaping off: \" \\ \b \f \n \r \t, other control bytes as
// \u00XX, invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped, everything
// else as is. sanitize's TestMarshalMatchesEncodingJSON and
// FuzzMarshalMatchesEncodingJSON hold it equal to encoding/json.
func AppendString(b []byte, s string) []byte { return appendString(b, s, false) }

// AppendHTMLString is AppendString with HTML escaping on, as json.Marshal
// encodes a string: < > & also as \u003c \u003e \u0026. internal/ops's
// FuzzChunkJSON holds it equal to encoding/json.
func AppendHTMLString(b []byte, s string) []byte { return appendString(b, s, true) }

// appendString is AppendString (AppendHTMLString when html is set) for a
// string's text as either type.
func appendString[T string | []byte](b []byte, s T, html bool) []byte {
	b = append(b, '"')
	start := 0
	safe := &safeASCII
	if html {
		safe = &htmlSafeASCII
	}
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if safe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		// At most 4 bytes: a []byte's conversion stays on the stack.
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
