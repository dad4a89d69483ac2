package ops

import (
	"encoding/json"
	"strconv"

	"github.com/idemguard/idemguard/internal/jsonvalue"
)

// marshalStreamRequest is json.Marshal(r): the same bytes, written
// without reflection for every request whose numbers are plain number
// literals (a decoded body's always are); any other goes to json.Marshal,
// which decides. FuzzStreamRequestEncoding holds the two equal.
func marshalStreamRequest(r *streamRequest) ([]byte, error) {
	if (r.Temperature != nil && !plainNumber(*r.Temperature)) || (r.TopP != nil && !plainNumber(*r.TopP)) {
		return json.Marshal(*r) // a copy: r stays on its caller's stack
	}
	n := 160 + len(r.Model) + len(r.SafetyIdentifier) + len(r.User)
	for _, m := range r.Messages {
		n += 32 + len(m.Role) + len(m.Content) + len(m.Content)/8
	}
	b := jsonvalue.AppendHTMLString(append(make([]byte, 0, n), `{"model":`...), r.Model)
	b = append(b, `,"messages":`...)
	if r.Messages == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, m := range r.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonvalue.AppendHTMLString(append(b, `{"role":`...), m.Role)
			b = append(jsonvalue.AppendHTMLString(append(b, `,"content":`...), m.Content), '}')
		}
		b = append(b, ']')
	}
	if r.MaxTokens != nil {
		b = strconv.AppendInt(append(b, `,"max_tokens":`...), int64(*r.MaxTokens), 10)
	}
	if r.Temperature != nil {
		b = append(append(b, `,"temperature":`...), *r.Temperature...)
	}
	if r.TopP != nil {
		b = append(append(b, `,"top_p":`...), *r.TopP...)
	}
	if r.Seed != nil {
		b = strconv.AppendInt(append(b, `,"seed":`...), *r.Seed, 10)
	}
	if len(r.Stop) > 0 {
		b = append(b, `,"stop":[`...)
		for i, s := range r.Stop {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonvalue.AppendHTMLString(b, s)
		}
		b = append(b, ']')
	}
	if r.SafetyIdentifier != "" {
		b = jsonvalue.AppendHTMLString(append(b, `,"safety_identifier":`...), r.SafetyIdentifier)
	}
	if r.User != "" {
		b = jsonvalue.AppendHTMLString(append(b, `,"user":`...), r.User)
	}
	b = strconv.AppendBool(append(b, `,"stream":`...), r.Stream)
	b = strconv.AppendBool(append(b, `,"stream_options":{"include_usage":`...), r.StreamOptions.IncludeUsage)
	return append(b, "}}"...), nil
}

// plainNumber reports whether n is a JSON number literal and nothing else,
// which encoding/json writes as it is.
func plainNumber(n json.Number) bool {
	if n == "" || n[0] != '-' && (n[0] < '0' || n[0] > '9') || n[len(n)-1] < '0' || n[len(n)-1] > '9' {
		return false
	}
	return json.Valid([]byte(n))
}
