package ops

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/idemguard/idemguard/internal/jsonvalue"
)

// The JSON of a streamed answer's chunks, without reflection
//
// Every upstream chunk is decoded and every event encoded, twenty times or
// more per answer: with encoding/json that was a third of a stream's CPU,
// and the event's bytes wait for it. appendChunk writes the bytes
// json.Marshal writes for a chunkEvent; decodeChunk reads the documents
// providers send (known members exactly named, at most once, integers
// plain) as json.Unmarshal does, and hands anything else to json.Unmarshal
// itself. Both are checked against encoding/json (FuzzChunkJSON).

// appendChunk appends json.Marshal(c), c.Choices nil written as [].
func appendChunk(b []byte, c chunkEvent) []byte {
	b = append(b, `{"object":`...)
	b = jsonvalue.AppendHTMLString(b, c.Object)
	b = append(b, `,"choices":[`...)
	for i, ch := range c.Choices {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = strconv.AppendInt(b, int64(ch.Index), 10)
		b = append(b, `,"delta":{`...)
		sep := false
		if ch.Delta.Role != "" {
			b = jsonvalue.AppendHTMLString(append(b, `"role":`...), ch.Delta.Role)
			sep = true
		}
		if ch.Delta.Content != nil {
			if sep {
				b = append(b, ',')
			}
			b = jsonvalue.AppendHTMLString(append(b, `"content":`...), *ch.Delta.Content)
		}
		b = append(b, `},"finish_reason":`...)
		if ch.FinishReason == nil {
			b = append(b, "null"...)
		} else {
			b = jsonvalue.AppendHTMLString(b, *ch.FinishReason)
		}
		b = append(b, '}')
	}
	b = append(b, ']')
	if u := c.Usage; u != nil {
		b = strconv.AppendInt(append(b, `,"usage":{"prompt_tokens":`...), u.PromptTokens, 10)
		b = strconv.AppendInt(append(b, `,"completion_tokens":`...), u.CompletionTokens, 10)
		b = strconv.AppendInt(append(b, `,"total_tokens":`...), u.TotalTokens, 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

// decodeChunk is json.Unmarshal(data, c).
func decodeChunk(data []byte, c *upstreamChunk) error {
	if jsonvalue.Valid(data) {
		d := chunkDecoder{b: data}
		if d.chunk(c) && d.end() {
			return nil
		}
		*c = upstreamChunk{}
	}
	return unmarshalChunk(data, c)
}

// unmarshalChunk is json.Unmarshal(data, c) into a chunk of its own, so
// that c, which encoding/json would send to the heap, stays on its
// caller's stack when the chunk is read without it.
func unmarshalChunk(data []byte, c *upstreamChunk) error {
	own := new(upstreamChunk)
	err := json.Unmarshal(data, own)
	*c = *own
	return err
}

// chunkDecoder reads a document json.Valid (jsonvalue.Valid) accepted. Each method reports
// false for what it does not read as encoding/json would (a member named
// in another case, twice, or escaped, a value of another type or null
// where encoding/json would keep what it had, a number not a plain
// integer): decodeChunk then asks encoding/json.
type chunkDecoder struct {
	b      []byte
	i      int
	strict bool // an unknown member declines (DisallowUnknownFields)
}

func (d *chunkDecoder) ws() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\t' || d.b[d.i] == '\n' || d.b[d.i] == '\r') {
		d.i++
	}
}

// peek is the next byte after white space (0 at the end).
func (d *chunkDecoder) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

func (d *chunkDecoder) end() bool { return d.peek() == 0 }

// null reads a null, if one is next.
func (d *chunkDecoder) null() bool {
	if d.peek() == 'n' {
		d.i += len("null")
		return true
	}
	return false
}

// open reads the start of an object.
func (d *chunkDecoder) open() bool {
	if d.peek() != '{' {
		return false
	}
	d.i++
	return true
}

// member reads the next member's name and its colon; false at the
// object's end.
func (d *chunkDecoder) member() ([]byte, bool) {
	switch d.peek() {
	case '}':
		d.i++
		return nil, false
	case ',':
		d.i++
		d.ws()
	}
	start := d.i + 1
	end := start + bytes.IndexByte(d.b[start:], '"')
	d.i = end + 1
	d.ws()
	d.i++ // the colon
	return d.b[start:end], true
}

// skip reads over a value of a valid document.
func (d *chunkDecoder) skip() {
	switch d.peek() {
	case '"':
		d.str()
		return
	case '{', '[':
		for depth := 0; ; {
			switch d.b[d.i] {
			case '"':
				d.str()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					d.i++
					return
				}
			}
			d.i++
		}
	}
	for d.i < len(d.b) && bytes.IndexByte([]byte(" \t\r\n,}]"), d.b[d.i]) < 0 {
		d.i++ // a number, true, false or null
	}
}

// str reads a string token and returns its raw bytes, quotes included.
func (d *chunkDecoder) str() []byte {
	start := d.i
	for d.i++; d.b[d.i] != '"'; d.i++ {
		if d.b[d.i] == '\\' {
			d.i++
		}
	}
	d.i++
	return d.b[start:d.i]
}

// stringPtr reads a string or null into *p, as encoding/json does.
func (d *chunkDecoder) stringPtr(p **string) bool {
	if d.null() {
		*p = nil
		return true
	}
	s, ok := d.string()
	if ok {
		*p = &s
	}
	return ok
}

// string reads a string, as encoding/json does; false for anything else.
func (d *chunkDecoder) string() (string, bool) {
	if d.peek() != '"' {
		return "", false
	}
	raw := d.str()
	if body := raw[1 : len(raw)-1]; bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return string(body), true
	}
	var s string // declared here, not above: its address escapes, and so would each string's
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// stringIn is string, returning the string of known it equals, if any,
// instead of a copy.
func (d *chunkDecoder) stringIn(known []string) (string, bool) {
	if d.peek() == '"' {
		if end := d.i + 1 + bytes.IndexByte(d.b[d.i+1:], '"'); end > d.i {
			for _, k := range known {
				if string(d.b[d.i+1:end]) == k {
					d.i = end + 1
					return k, true
				}
			}
		}
	}
	return d.string()
}

// integer reads a plain integer (digits, an optional minus) of at most
// 18 digits.
func (d *chunkDecoder) integer() (int64, bool) {
	d.ws()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	if d.i == start || d.i-start > 18 || d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		return 0, false
	}
	n, err := strconv.ParseInt(string(d.b[start:d.i]), 10, 64)
	return n, err == nil
}

// number reads a number token as written (what encoding/json keeps in a
// json.Number).
func (d *chunkDecoder) number() (json.Number, bool) {
	if c := d.peek(); c != '-' && (c < '0' || c > '9') {
		return "", false
	}
	start := d.i
	for d.i < len(d.b) && bytes.IndexByte([]byte("0123456789+-.eE"), d.b[d.i]) >= 0 {
		d.i++
	}
	return json.Number(d.b[start:d.i]), true
}

// names checks a member's name: false (ask encoding/json) for one seen
// before, a known one in another case, or one escaped or not ASCII (which
// encoding/json may fold into a known one); i is the index of a known one
// in fields, -1 for another.
type names struct{ seen uint8 }

func (n *names) known(name []byte, fields ...string) (i int, ok bool) {
	for _, c := range name {
		if c == '\\' || c >= utf8.RuneSelf {
			return -1, false
		}
	}
	for i, f := range fields {
		switch {
		case string(name) == f:
			if n.seen&(1<<i) != 0 {
				return -1, false
			}
			n.seen |= 1 << i
			return i, true
		case len(name) == len(f) && bytes.EqualFold(name, []byte(f)):
			return -1, false
		}
	}
	return -1, true
}

// The members each object of a chunk decodes, by position in known's
// fields; any other member is skipped.
var (
	chunkFields  = []string{"choices", "usage"}
	choiceFields = []string{"index", "delta", "finish_reason"}
	deltaFields  = []string{"role", "content"}
	usageFields  = []string{"prompt_tokens", "completion_tokens", "total_tokens"}
)

// object decodes an object whose known members are fields: value(i)
// decodes the value of the member fields[i], and any other member is
// skipped. false: not JSON this decoder takes (encoding/json decides).
func (d *chunkDecoder) object(fields []string, value func(i int) bool) bool {
	var seen names
	if !d.open() {
		return false
	}
	for {
		name, more := d.member()
		if !more {
			return true
		}
		i, ok := seen.known(name, fields...)
		switch {
		case !ok, i < 0 && d.strict:
			return false
		case i < 0:
			d.skip()
		case !value(i):
			return false
		}
	}
}

func (d *chunkDecoder) chunk(c *upstreamChunk) bool {
	return d.object(chunkFields, func(i int) bool {
		switch {
		case i == 0:
			return d.choices(c)
		case d.null():
			c.Usage = nil
			return true
		}
		c.Usage = &chunkUsage{}
		return d.usage(c.Usage)
	})
}

func (d *chunkDecoder) choices(c *upstreamChunk) bool {
	if d.null() {
		c.Choices = nil
		return true
	}
	c.Choices = make([]upstreamChoice, 0, 1)
	return d.array(func() bool {
		c.Choices = append(c.Choices, upstreamChoice{})
		return d.choice(&c.Choices[len(c.Choices)-1])
	})
}

// array reads an array whose elements elem reads, in turn; false for
// anything else.
func (d *chunkDecoder) array(elem func() bool) bool {
	if d.peek() != '[' {
		return false
	}
	d.i++
	if d.peek() == ']' {
		d.i++
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.peek() == ']' {
			d.i++
			return true
		}
		d.i++ // the comma
	}
}

func (d *chunkDecoder) choice(ch *upstreamChoice) bool {
	return d.object(choiceFields, func(i int) bool {
		switch i {
		case 0:
			n, ok := d.integer()
			ch.Index = int(n)
			return ok
		case 1:
			return d.delta(ch)
		}
		return d.stringPtr(&ch.FinishReason)
	})
}

func (d *chunkDecoder) delta(ch *upstreamChoice) bool {
	return d.object(deltaFields, func(i int) bool {
		if i == 0 {
			return d.stringPtr(&ch.Delta.Role)
		}
		return d.stringPtr(&ch.Delta.Content)
	})
}

func (d *chunkDecoder) usage(u *chunkUsage) bool {
	return d.object(usageFields, func(i int) bool {
		n, ok := d.integer()
		switch i {
		case 0:
			u.PromptTokens = n
		case 1:
			u.CompletionTokens = n
		default:
			u.TotalTokens = n
		}
		return ok
	})
}

// decodeChatResponse is json.Unmarshal(data, r): a plain call's answer,
// read like a chunk (the same fast path, the same fallback).
func decodeChatResponse(data []byte, r *chatResponse) error {
	if jsonvalue.Valid(data) {
		d := chunkDecoder{b: data}
		if d.chatResponse(r) && d.end() {
			return nil
		}
		*r = chatResponse{}
	}
	return unmarshalChatResponse(data, r)
}

// unmarshalChatResponse is json.Unmarshal(data, r) into an answer of its
// own (unmarshalChunk's reason: r stays on its caller's stack).
func unmarshalChatResponse(data []byte, r *chatResponse) error {
	own := new(chatResponse)
	err := json.Unmarshal(data, own)
	*r = *own
	return err
}

// finishReasons are the finish reasons OpenAI's answers give, which
// stringIn returns without a copy; finishReasonValues are the same as
// values of an answer's data, made once (boxing a string allocates).
var (
	finishReasons      = []string{"stop", "length", "tool_calls", "content_filter", "function_call"}
	finishReasonValues = func() []any {
		vs := make([]any, len(finishReasons))
		for i, r := range finishReasons {
			vs[i] = r
		}
		return vs
	}()
)

// finishReasonValue is r as a value of an answer's data.
func finishReasonValue(r string) any {
	for i, k := range finishReasons {
		if r == k {
			return finishReasonValues[i]
		}
	}
	return r
}

// The members of a chat completion's objects the decoder reads.
var (
	responseFields     = []string{"choices", "usage"}
	answerChoiceFields = []string{"message", "finish_reason"}
	contentFields      = []string{"content"}
)

func (d *chunkDecoder) chatResponse(r *chatResponse) bool {
	return d.object(responseFields, func(i int) bool {
		if i == 1 {
			return d.usage(&r.Usage) // null: false, encoding/json decides
		}
		if d.null() {
			r.Choices = nil
			return true
		}
		r.Choices = make([]chatChoice, 0, 1)
		return d.array(func() bool {
			r.Choices = append(r.Choices, chatChoice{})
			return d.chatChoice(&r.Choices[len(r.Choices)-1])
		})
	})
}

func (d *chunkDecoder) chatChoice(ch *chatChoice) bool {
	return d.object(answerChoiceFields, func(i int) bool {
		if i == 0 {
			return d.object(contentFields, func(int) bool {
				if d.null() {
					return true // encoding/json leaves a string as it is for a null
				}
				s, ok := d.string()
				ch.Message.Content = s
				return ok
			})
		}
		s, ok := d.stringIn(finishReasons) // null: false, encoding/json decides
		ch.FinishReason = s
		return ok
	})
}
