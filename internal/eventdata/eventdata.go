// Package eventdata applies the envelope's blocklist to the events of a
// server-sent event stream written by a handler: the middleware
// (routers/middleware) reads every event its handler writes with Parse
// before the guard relays and stores it, and the simulation (internal/sim)
// passes its handler-like events through the same reading.
//
// Each event's JSON data keeps the blocklist at every depth (a member named
// prompt, debug, provider, ... is dropped wherever it is), in every JSON
// document the event holds (several data lines may hold one each); the
// names of the removed members are returned, so that the caller counts them
// like those of any answer. Data that is not JSON is kept as written, unless
// it could hide a document the blocklist cannot read: that event is refused.
package eventdata

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/testhooks"
	"github.com/idemguard/idemguard/sanitize"
)

// Parse reads one event block (its "event:" and "data:" fields; comments
// and ids are not kept; the blank line that ends it left out) and applies
// the blocklist to its data (Clean). It returns the names of the blocked
// members it removed (paths such as "choices[].delta.prompt"); refused is
// true for an event whose data the blocklist cannot be applied to with
// certainty; ok is false for a block without data. defect is the guard's
// test knob (testhooks.Knobs.Defect; "" in production).
func Parse(block []byte, defect testhooks.Defect) (e idemguard.Chunk, dropped []string, refused, ok bool) {
	var data []string
	for _, line := range strings.Split(strings.ReplaceAll(string(block), "\r", ""), "\n") {
		switch {
		case strings.HasPrefix(line, "event:"):
			e.Type = strings.TrimPrefix(strings.TrimPrefix(line, "event:"), " ")
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if data == nil {
		return e, nil, false, false
	}
	e.Data, dropped, refused = Clean([]byte(strings.Join(data, "\n")), defect)
	return e, dropped, refused, true
}

// Clean drops the blocklisted members, at every depth, of every JSON
// document an event's data holds: data that is a sequence of JSON documents
// (one, or several, say one per data line) is cleaned document by document,
// each written on a line of its own if any member went; data that is not has
// each of its lines that is a JSON sequence cleaned the same way, and the
// rest kept as written, unless a JSON reader could still find a blocked
// member in it (a quoted blocked name followed by a colon, however escaped):
// then the event is refused. Text, code and [DONE] are kept as written.
//
// With defect testhooks.DefectBlocklistMultiDocument, data of several JSON
// documents is kept as written, blocked members and all, as the middleware
// once did (its decoder saw more input after the first document and gave
// up).
func Clean(b []byte, defect testhooks.Defect) (out []byte, dropped []string, refused bool) {
	if cleaned, names, ok := cleanSequence(b, defect); ok {
		return cleaned, names, false
	}
	lines := bytes.Split(b, []byte("\n"))
	for i, line := range lines {
		if cleaned, names, ok := cleanSequence(line, defect); ok {
			lines[i], dropped = cleaned, append(dropped, names...)
		}
	}
	out = bytes.Join(lines, []byte("\n"))
	if name := blockedMemberName(out); name != "" {
		return nil, append(dropped, name), true
	}
	return out, dropped, false
}

// cleanSequence drops the blocked members of the JSON documents b holds, one
// after another; ok is false when b is not a sequence of JSON documents.
// Nothing dropped, b is returned as it is.
func cleanSequence(b []byte, defect testhooks.Defect) (out []byte, dropped []string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var docs []any
	for {
		var v any
		err := dec.Decode(&v)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, false
		}
		docs = append(docs, v)
	}
	if len(docs) == 0 {
		return nil, nil, false
	}
	if len(docs) > 1 && defect == testhooks.DefectBlocklistMultiDocument {
		return b, nil, true
	}
	for _, v := range docs {
		dropBlocked(v, "", func(name string) { dropped = append(dropped, name) })
	}
	if len(dropped) == 0 {
		return b, nil, true
	}
	encoded := make([][]byte, len(docs))
	for i, v := range docs {
		encoded[i] = encode(v)
	}
	return bytes.Join(encoded, []byte("\n")), dropped, true
}

// encode writes a decoded document as compact JSON, without HTML escapes.
func encode(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("eventdata: a decoded document does not encode: " + err.Error())
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// dropBlocked removes blocked keys in place, calling dropped with the path
// of each.
func dropBlocked(v any, path string, dropped func(string)) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			name := k
			if path != "" {
				name = path + "." + k
			}
			if sanitize.IsBlockedKey(k) {
				delete(t, k)
				dropped(name)
				continue
			}
			dropBlocked(x, name, dropped)
		}
	case []any:
		for _, x := range t {
			dropBlocked(x, path+"[]", dropped)
		}
	}
}

// blockedMemberName returns a blocked name that b holds as an object
// member's name would be written: a JSON string (escapes decoded) followed,
// after white space, by a colon; "" when there is none. Every quote not
// escaped is tried as the start of such a string, so text whose quotes do
// not pair up hides none; each try ends at the next quote or line end, so
// the scan is linear.
func blockedMemberName(b []byte) string {
	for i := 0; i < len(b); i++ {
		if b[i] != '"' || i > 0 && b[i-1] == '\\' {
			continue
		}
		end := i + 1
		for end < len(b) && b[end] != '"' && b[end] != '\n' {
			if b[end] == '\\' {
				end++
			}
			end++
		}
		if end >= len(b) || b[end] != '"' {
			continue
		}
		after := bytes.TrimLeft(b[end+1:], " \t\r\n")
		var name string
		if len(after) > 0 && after[0] == ':' && json.Unmarshal(b[i:end+1], &name) == nil && sanitize.IsBlockedKey(name) {
			return name
		}
	}
	return ""
}
