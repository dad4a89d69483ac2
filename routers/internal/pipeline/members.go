package pipeline

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/idemguard/idemguard/internal/jsonvalue"
	"github.com/idemguard/idemguard/internal/keys"
)

// TakeMembers takes the members named out of body, a JSON object whose
// member names are unique, and returns the rest re-encoded and what was
// taken (nil when none was present: rest is body as it is). Members that
// say how to deliver an answer (a stream, an MCP tool's idempotencyKey) are
// part of neither the key nor the fingerprint: every door takes them out
// before the inputs are keyed, here or (a stream's, routers' deliveryMode)
// with jsonvalue.TakeCanonical, which gives the same rest. ok is false when
// body is not such an object; rest is then body.
func TakeMembers(body json.RawMessage, names ...string) (rest json.RawMessage, taken map[string]any, ok bool, err error) {
	v, ok := jsonvalue.DecodeUniqueKeys(body)
	if !ok {
		return body, nil, false, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return body, nil, false, nil
	}
	for _, m := range names {
		if x, has := obj[m]; has {
			if taken == nil {
				taken = make(map[string]any, len(names))
			}
			taken[m] = x
			delete(obj, m)
		}
	}
	if taken == nil {
		return body, nil, true, nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, nil, true, Reject(ErrInvalidBody, "the body could not be re-encoded")
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), taken, true, nil
}

// ClientKey checks an idempotency key sent as a value (an MCP tool's
// idempotencyKey argument) by the rules of the Idempotency-Key header.
func ClientKey(v string) (string, error) { return clientKey(v, "idempotencyKey", "") }

// clientKey checks a client key named what (the header, the argument).
func clientKey(v, what, form string) (string, error) {
	if err := keys.ValidateClientKey(v); err != nil {
		// The keys error says what is wrong (empty, length, position of
		// the first bad character) without quoting the key.
		why := strings.TrimPrefix(err.Error(), keys.ErrInvalidClientKey.Error()+": ")
		return "", Reject(ErrInvalidKey, "%s; an %s is 1 to %d characters of [A-Za-z0-9_.:-]%s", why, what, keys.MaxClientKeyLen, form)
	}
	return v, nil
}
