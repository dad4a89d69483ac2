package live

import (
	"bufio"
	"bytes"
	"errors"
	"strings"
)

// Event is one server-sent event. Data may hold several lines; each becomes
// its own "data:" field. ID and Type must be single lines (Valid).
type Event struct {
	// ID is the event's id field ("" for none): what a reconnecting
	// EventSource sends back as Last-Event-ID.
	ID string
	// Type is the event field ("" for the default "message").
	Type string
	// Data is the event's payload, usually one JSON document.
	Data []byte
}

// ErrInvalidEvent reports an event whose ID or Type contains a line break or
// a NUL, which would split or corrupt the event on the wire.
var ErrInvalidEvent = errors.New("live: event id and type must be single lines without NUL")

// Valid reports ErrInvalidEvent for an ID or Type that would break the
// framing of AppendSSE.
func (e Event) Valid() error {
	if strings.ContainsAny(e.ID, "\r\n\x00") || strings.ContainsAny(e.Type, "\r\n") {
		return ErrInvalidEvent
	}
	return nil
}

// WireSize is len(AppendSSE(nil, e)) without rendering it: the measure of
// the Log's bound, and of a stored sequence. Each line break of Data
// starts a new "data: " line, and a \r\n is written as one \n.
func WireSize(e Event) int {
	n := len("data: ") + len(e.Data) + 2
	if e.ID != "" {
		n += len("id: ") + len(e.ID) + 1
	}
	if e.Type != "" {
		n += len("event: ") + len(e.Type) + 1
	}
	breaks := bytes.Count(e.Data, []byte{'\n'})
	if cr := bytes.Count(e.Data, []byte{'\r'}); cr > 0 {
		crlf := bytes.Count(e.Data, []byte("\r\n"))
		breaks += cr - crlf
		n -= crlf
	}
	return n + breaks*len("data: ")
}

// AppendSSE appends the event's wire form to dst: "id:", "event:" and one
// "data:" line per line of Data, then a blank line. Line breaks inside Data
// (\n, \r\n or \r) each start a new data line, so the receiver's
// reassembly (lines joined by \n) gives Data back with \n line ends.
// The event must be Valid.
func AppendSSE(dst []byte, e Event) []byte {
	if e.ID != "" {
		dst = append(dst, "id: "...)
		dst = append(dst, e.ID...)
		dst = append(dst, '\n')
	}
	if e.Type != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, e.Type...)
		dst = append(dst, '\n')
	}
	data := e.Data
	// The usual data, one JSON document, has no line break: two
	// vectorised searches say so, where IndexAny reads byte by byte.
	lines := bytes.IndexByte(data, '\n') >= 0 || bytes.IndexByte(data, '\r') >= 0
	for lines {
		i := bytes.IndexAny(data, "\r\n")
		if i < 0 {
			break
		}
		dst = append(dst, "data: "...)
		dst = append(dst, data[:i]...)
		dst = append(dst, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	dst = append(dst, "data: "...)
	dst = append(dst, data...)
	return append(dst, '\n', '\n')
}

// Comment renders an SSE comment line (": text"), which clients ignore:
// used as a keep-alive so that proxies do not close an idle stream.
func Comment(text string) []byte {
	return []byte(": " + strings.NewReplacer("\r", " ", "\n", " ").Replace(text) + "\n\n")
}

// ReadSSE reads the next event from r: the receiving side of AppendSSE,
// for clients of the event streams (tests, the benchmark). Its data lines
// are joined by \n; a field's one leading space is dropped; comments and
// unknown fields are skipped; a blank line after no data line dispatches
// nothing, as in an EventSource. The error is r's (io.EOF at the end of
// the stream); an event the stream cut off is lost with it.
func ReadSSE(r *bufio.Reader) (Event, error) {
	var e Event
	var data []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return Event{}, err
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if data != nil {
				e.Data = []byte(strings.Join(data, "\n"))
				return e, nil
			}
			e = Event{}
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			e.ID = value
		case "event":
			e.Type = value
		case "data":
			data = append(data, value)
		}
	}
}
