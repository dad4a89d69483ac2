package idemguard

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idemguard/idemguard/internal/jsonvalue"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// replay answers a succeeded row. readAt is the local time taken before the
// read, so the cache entry's lifetime (the row's remaining TTL on the
// database's clock) is counted from before the read, never after it.
func (g *Guard) replay(ctx context.Context, p prepared, rec store.Record, readAt time.Time) (Result, error) {
	st, err := decodeStored(rec)
	if err != nil {
		return Result{}, g.storeErr(ctx, p, "read", err)
	}
	body := st.document
	if body == nil {
		st.env.Cached = true
		if body, err = sanitize.Marshal(st.env); err != nil {
			return Result{}, g.storeErr(ctx, p, "read", err)
		}
	}
	res := Result{Status: StatusSucceeded, Envelope: st.env, Body: body, StatusCode: cmp.Or(rec.ResponseCode, http.StatusOK),
		Cached: true, StopReason: cmp.Or(st.env.StopReason, sanitize.Completed), Attempt: rec.Attempts, FirstSeen: rec.CreatedAt,
		CompletedAt: rec.CompletedAt, KeyHash: p.keyHash, Header: st.header, DroppedFields: st.dropped, Usage: st.usage}
	if left := rec.ExpiresAt.Sub(rec.Now); left > 0 {
		// The cache is looked up under the request's current hash: a row
		// made under a previous secret is cached there, with the current
		// fingerprint of the same inputs.
		key, fingerprint := p.keyHash, p.fingerprint
		if p.onPrevious() {
			key, fingerprint = p.versions[0].keyHash, p.versions[0].fingerprint
		}
		g.cache.put(p.tenant, p.scope, key, fingerprint, res, readAt.Add(min(left, g.cacheAge(p))))
	}
	return res, nil
}

func (g *Guard) storedFailure(p prepared, rec store.Record, env sanitize.Envelope) Result {
	env.OK, env.Cached = false, true
	body, err := sanitize.Marshal(env)
	if err != nil {
		body = nil
	}
	return Result{Status: StatusFailed, Envelope: env, Body: body, StatusCode: cmp.Or(rec.ResponseCode, http.StatusBadGateway),
		Cached: true, StopReason: env.StopReason, Attempt: rec.Attempts, FirstSeen: rec.CreatedAt,
		CompletedAt: rec.CompletedAt, KeyHash: p.keyHash}
}

func (g *Guard) inProgress(p prepared, rec store.Record) Result {
	env := sanitize.Failure(sanitize.InProgress)
	body, _ := sanitize.Marshal(env)
	return Result{Status: StatusInProgress, Envelope: env, Body: body, StatusCode: http.StatusConflict,
		StopReason: sanitize.InProgress, Attempt: rec.Attempts, FirstSeen: rec.CreatedAt, KeyHash: p.keyHash}
}

// answerFromRow answers a call whose claim another caller took: in progress
// while that caller runs, else the stored answer. false when the row cannot
// be read or names other inputs.
func (g *Guard) answerFromRow(ctx context.Context, p prepared) (Result, bool) {
	readAt := g.now()
	rec, err := g.get(ctx, p)
	if err != nil || rec.Fingerprint != p.fingerprint {
		return Result{}, false
	}
	switch rec.Status {
	case store.RowStarted:
		g.emit(Event{Kind: EventInProgress, Scope: p.scope})
		g.noteInProgress(p, rec, store.InProgressAnswered)
		return g.inProgress(p, rec), true
	case store.RowSucceeded:
		// The delivery answers it, as from the claim loop: a stream
		// replays the stored events, not the envelope.
		if res, err := p.delivery.replay(ctx, g, p, rec, readAt); err == nil {
			return res, true
		}
	case store.RowFailed:
		if st, err := decodeStored(rec); err == nil {
			res := g.storedFailure(p, rec, st.env)
			g.noteReplay(p, res, rec.Now)
			return res, true
		}
	}
	return Result{}, false
}

// stored is a row's answer as decoded: an envelope, or a document's exact
// bytes (Call.Keep), with the headers replayed with it and the names of the
// fields dropped from it.
type stored struct {
	env      sanitize.Envelope
	document []byte // nil for an envelope
	header   http.Header
	dropped  []string
	usage    Usage
}

// storedWrapper is the stored form of an answer that carries more than an
// envelope: {"body": <envelope object, or a JSON string holding the
// document's bytes>, "headers": {...}, "dropped": [...]}. A plain envelope is
// stored as itself (as every row did before documents and headers), and an
// envelope never has a top-level "body". A document goes in as a string
// because a JSON column normalizes objects (key order, number forms), and a
// replay must send the first caller's bytes.
type storedWrapper struct {
	Body    json.RawMessage `json:"body"`
	Headers http.Header     `json:"headers,omitempty"`
	Dropped []string        `json:"dropped,omitempty"`
	Usage   *Usage          `json:"usage,omitempty"`
}

// maxStoredDropped bounds the dropped names a row keeps.
const maxStoredDropped = 64

// encodeStored is the response column for body (envelope JSON, or a
// document when document is true), its headers and dropped names.
func encodeStored(body []byte, document bool, header http.Header, dropped []string, usage Usage) ([]byte, error) {
	if !document && len(header) == 0 && len(dropped) == 0 {
		switch {
		case usage == (Usage{}):
			return body, nil
		case compactAsIs(body):
			return appendStoredUsage(body, usage), nil
		}
	}
	w := storedWrapper{Body: body, Headers: header}
	if usage != (Usage{}) {
		w.Usage = &usage
	}
	for _, n := range dropped[:min(len(dropped), maxStoredDropped)] {
		w.Dropped = append(w.Dropped, droppedLabel(n))
	}
	if document {
		s, err := json.Marshal(string(body))
		if err != nil {
			return nil, err
		}
		w.Body = s
	}
	return json.Marshal(w)
}

// appendStoredUsage is json.Marshal(storedWrapper{Body: body, Usage:
// &usage}) for a body that compactAsIs, without reflection: an answer with
// usage (every openai_chat answer) is stored so.
func appendStoredUsage(body []byte, usage Usage) []byte {
	b := make([]byte, 0, len(body)+64)
	b = append(append(b, `{"body":`...), body...)
	b = append(b, `,"usage":{`...)
	if usage.PromptTokens != 0 {
		b = strconv.AppendInt(append(b, `"prompt":`...), usage.PromptTokens, 10)
	}
	if usage.CompletionTokens != 0 {
		if usage.PromptTokens != 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(append(b, `"completion":`...), usage.CompletionTokens, 10)
	}
	return append(b, "}}"...)
}

// compactAsIs reports whether encoding/json writes b unchanged as a
// json.RawMessage: valid JSON, with no white space outside its strings and
// nothing it escapes for HTML (<, >, &, U+2028, U+2029) in them. An
// envelope as sanitize encodes it is.
func compactAsIs(b []byte) bool {
	if !jsonvalue.Valid(b) {
		return false
	}
	inString := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '<' || c == '>' || c == '&':
			return false
		case c == 0xE2 && i+2 < len(b) && b[i+1] == 0x80 && b[i+2]&^1 == 0xA8:
			return false
		case inString && c == '\\':
			i++ // the escaped byte
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return false
		}
	}
	return true
}

func decodeStored(rec store.Record) (stored, error) {
	if len(rec.Response) == 0 {
		return stored{}, fmt.Errorf("%s row %d has no stored response", rec.Status, rec.ID)
	}
	b := rec.Response
	var st stored
	if bytes.Contains(b, []byte(`"body"`)) {
		var w storedWrapper
		if err := json.Unmarshal(b, &w); err != nil {
			return stored{}, fmt.Errorf("stored response of row %d: %w", rec.ID, err)
		}
		if len(w.Body) > 0 { // else an envelope whose data holds a "body"
			st.header, st.dropped, b = w.Headers, w.Dropped, w.Body
			if w.Usage != nil {
				st.usage = *w.Usage
			}
			if b[0] == '"' {
				var doc string
				if err := json.Unmarshal(b, &doc); err != nil {
					return stored{}, fmt.Errorf("stored document of row %d: %w", rec.ID, err)
				}
				st.document = []byte(doc)
				return st, nil
			}
		}
	}
	env, err := sanitize.FromJSON(b)
	if err != nil {
		return stored{}, fmt.Errorf("stored response of row %d: %w", rec.ID, err)
	}
	st.env = env
	return st, nil
}
