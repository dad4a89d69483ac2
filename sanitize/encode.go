package sanitize

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Size limits of [Policy].
const (
	// DefaultMaxBytes is the stored envelope's size limit when
	// Policy.MaxBytes is 0.
	DefaultMaxBytes = 64 << 10
	// MinMaxBytes is the smallest Policy.MaxBytes accepted; the minimal
	// envelope (ok, stopReason, needsHuman, cached) always fits in it.
	MinMaxBytes = 1 << 10
)

// Policy is the size policy applied when an envelope is stored.
type Policy struct {
	// MaxBytes is the largest stored envelope, in bytes of encoded JSON.
	// Defaults to DefaultMaxBytes (64 KiB) when 0; otherwise at least
	// MinMaxBytes (1 KiB).
	MaxBytes int
}

// Validate reports whether p is usable.
func (p Policy) Validate() error {
	if p.MaxBytes != 0 && p.MaxBytes < MinMaxBytes {
		return fmt.Errorf("sanitize: Policy.MaxBytes is %d; set it to at least %d (MinMaxBytes), or to 0 for the default of %d", p.MaxBytes, MinMaxBytes, DefaultMaxBytes)
	}
	return nil
}

func (p Policy) maxBytes() int {
	if p.MaxBytes == 0 {
		return DefaultMaxBytes
	}
	return p.MaxBytes
}

// Encode returns the bytes to store for e: e sanitized again (so a
// hand-built envelope cannot bypass the allowlist), Cached forced false, and
// the size policy applied. It never fails for an envelope produced by
// [FromJSON] under a valid policy.
func (p Policy) Encode(e Envelope) ([]byte, error) {
	b, _, err := p.EncodeReport(e)
	return b, err
}

// EncodeReport is [Policy.Encode] that also reports whether the size policy
// dropped anything: data first, then createdActionRequestIds and traceId.
// The result is never longer than the policy's MaxBytes.
func (p Policy) EncodeReport(e Envelope) (b []byte, dropped bool, err error) {
	if err := p.Validate(); err != nil {
		return nil, false, err
	}
	e.Cached = false
	raw, err := Marshal(e)
	if err != nil {
		return nil, false, err
	}
	// Sanitizing our own encoding is cheap and makes Encode safe for any
	// Envelope, not only those made by FromJSON.
	if e, err = FromJSON(raw); err != nil {
		return nil, false, err
	}
	limit := p.maxBytes()
	if b, err = Marshal(e); err != nil || len(b) <= limit {
		return b, false, err
	}
	e.Data = nil
	if b, err = Marshal(e); err != nil || len(b) <= limit {
		return b, true, err
	}
	e.CreatedActionRequestIDs = nil
	e.TraceID = ""
	if b, err = Marshal(e); err != nil {
		return nil, true, err
	}
	if len(b) > limit { // unreachable: the minimal envelope is < 100 bytes
		return nil, true, fmt.Errorf("sanitize: minimal envelope of %d bytes exceeds Policy.MaxBytes %d", len(b), limit)
	}
	return b, true, nil
}

// Marshal encodes e deterministically, exactly as it is stored and replayed
// (the encoder of [Policy.Encode]): struct field order, data keys sorted, no
// HTML escaping, no trailing newline. It neither sanitizes nor applies a size
// policy, and it keeps Cached as set.
func Marshal(e Envelope) ([]byte, error) {
	if b, ok := appendEnvelope(make([]byte, 0, 256), e); ok {
		return b, nil
	}
	return marshalJSON(e)
}

// marshalJSON is Marshal by encoding/json: the reference appendEnvelope must
// match, and the path for data values appendEnvelope does not handle.
func marshalJSON(e Envelope) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, fmt.Errorf("sanitize: encode envelope: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
