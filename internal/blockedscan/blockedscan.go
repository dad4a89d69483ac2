// Package blockedscan is a test oracle for the guarantee that no blocked
// member (sanitize.IsBlockedKey) reaches a reader: it looks for one in every
// JSON document a reader could take from some bytes. The simulator's checker
// and the stream tests share it, so both hold the data to one rule.
package blockedscan

import (
	"bytes"
	"encoding/json"

	"github.com/idemguard/idemguard/sanitize"
)

// Member returns a blocked member of a JSON document in data, or "": the
// documents read from the whole of data as a sequence, or from any line of
// it as one, and, with everyBrace, the document starting at any '{' of data.
func Member(data []byte, everyBrace bool) string {
	if bytes.IndexAny(data, "{[") < 0 {
		return "" // no document, so no member
	}
	for _, view := range append([][]byte{data}, bytes.Split(data, []byte("\n"))...) {
		dec := json.NewDecoder(bytes.NewReader(view))
		for {
			var doc any
			if dec.Decode(&doc) != nil {
				break
			}
			if name := In(doc); name != "" {
				return name
			}
		}
	}
	if !everyBrace {
		return ""
	}
	for i := range data {
		if data[i] != '{' {
			continue
		}
		var doc any
		if json.NewDecoder(bytes.NewReader(data[i:])).Decode(&doc) == nil {
			if name := In(doc); name != "" {
				return name
			}
		}
	}
	return ""
}

// In returns a blocked member name anywhere in the decoded JSON value v, or "".
func In(v any) string {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if sanitize.IsBlockedKey(k) {
				return k
			}
			if name := In(x); name != "" {
				return name
			}
		}
	case []any:
		for _, x := range t {
			if name := In(x); name != "" {
				return name
			}
		}
	}
	return ""
}
