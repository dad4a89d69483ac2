// Package keys derives idemguard's stored identifiers: the canonical form of
// an operation's inputs, the key_hash that names a (tenant, scope, key) row and
// the request fingerprint that detects a reused client key.
//
// Every value that reaches the database is an HMAC-SHA256 under the service
// secret, so a leaked table reveals neither client keys nor inputs, and a
// guess cannot be checked without the secret.
//
// # Canonical form
//
// [Canonicalize] decodes the inputs with encoding/json's UseNumber and writes
// them back with object keys sorted (byte order) at every level and no
// insignificant white space. Two inputs are the same request exactly when
// their canonical forms are equal byte for byte. What that means for the
// less obvious cases:
//
//   - Numbers are kept exactly as written, never parsed into float64: 1.0
//     and 1, 1e2 and 100, 1E2 and 1e2, -0 and 0 are different inputs, with
//     different key hashes and fingerprints. A client that means the same
//     number must write it the same way.
//   - Numbers beyond float64 (1e400, a 300-digit integer, -1e-400) are valid
//     inputs, kept digit for digit; nothing overflows, rounds or becomes
//     Inf or 0.
//   - Strings are re-encoded: escapes such as \u00e9 become the character,
//     <, > and & are not escaped, and U+2028, U+2029 and control characters
//     are escaped the way encoding/json escapes them.
//   - Invalid UTF-8 inside a string becomes U+FFFD, so two such inputs may
//     collide; the HTTP API rejects bodies that are not valid UTF-8 before
//     they get here.
//   - Of duplicate object keys the last one wins, as in encoding/json.
package keys

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/idemguard/idemguard/internal/jsonvalue"
)

// MinSecretBytes is the shortest secret New accepts.
const MinSecretBytes = 32

// MaxClientKeyLen is the longest client key (Idempotency-Key) accepted.
const MaxClientKeyLen = 255

// MaxScopeLen is the longest scope accepted.
const MaxScopeLen = 255

var (
	// ErrShortSecret is returned by New for a secret under MinSecretBytes.
	ErrShortSecret = errors.New("keys: secret must be at least 32 bytes")
	// ErrInvalidClientKey is returned for a client key that is empty, longer
	// than MaxClientKeyLen or holds a character outside [A-Za-z0-9_.:-].
	ErrInvalidClientKey = errors.New("keys: invalid idempotency key")
	// ErrInvalidScope is returned for a scope that is empty, longer than
	// MaxScopeLen or holds a character outside [A-Za-z0-9._:-].
	ErrInvalidScope = errors.New("keys: invalid scope")
	// ErrInvalidInputs is returned when inputs are not valid JSON.
	ErrInvalidInputs = errors.New("keys: inputs are not valid JSON")
)

// Domain-separation tags. Each field of a tagged tuple is written as
// tag byte, 8-byte big-endian length, bytes; so two different tuples can never
// encode to the same byte string, whatever their contents.
const (
	version        = "idemguard/v1"
	tagKeyHash     = 'H'
	tagFingerprint = 'F'
	tagActor       = 'A'
	tagTenant      = 't'
	tagScope       = 's'
	tagPrincipal   = 'p'
	tagClientKey   = 'k'
	tagInputs      = 'i'
)

// Deriver computes key hashes and fingerprints under one secret. It is safe
// for concurrent use.
type Deriver struct {
	pool sync.Pool // of *macState
}

// macState is one HMAC-SHA256 keyed with the secret and the scratch space
// of a derivation. The tagged tuple is assembled in msg and written to the
// HMAC in one Write: the HMAC sees the same bytes as field-by-field writes
// (the vectors in keys_test.go pin them), without an allocation per field
// (a header array or a string converted for io.Writer escapes to the heap).
type macState struct {
	h   hash.Hash
	msg []byte
	sum [sha256.Size]byte
	hex [2 * sha256.Size]byte
}

// New returns a Deriver for secret, which must be at least MinSecretBytes long.
func New(secret []byte) (*Deriver, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("%w (got %d)", ErrShortSecret, len(secret))
	}
	key := bytes.Clone(secret)
	d := &Deriver{}
	d.pool.New = func() any { return &macState{h: hmac.New(sha256.New, key), msg: make([]byte, 0, 256)} }
	return d, nil
}

// maxPooledMsg bounds the scratch buffer a pooled state keeps, so that one
// call with large inputs does not pin its buffer for the process's life.
const maxPooledMsg = 64 << 10

// KeyHash returns the hex HMAC of the tagged tuple (tenant, scope, clientKey)
// when clientKey is not empty, else (tenant, scope, canonicalInputs).
// canonicalInputs must come from Canonicalize.
func (d *Deriver) KeyHash(tenant, scope, clientKey string, canonicalInputs []byte) string {
	return d.PrincipalKeyHash(tenant, scope, "", clientKey, canonicalInputs)
}

// PrincipalKeyHash is KeyHash in the key space of one principal of the
// tenant (a user, an API key): a non-empty principal is a field of its own
// in the tagged tuple, between the scope and the key, so two principals'
// identical requests or client keys name different keys, and a key hash
// reveals nothing of its principal. An empty principal gives KeyHash's
// value (the tenant's shared key space), so hashes made before principals
// existed keep their rows.
func (d *Deriver) PrincipalKeyHash(tenant, scope, principal, clientKey string, canonicalInputs []byte) string {
	st := d.pool.Get().(*macState)
	defer d.put(st)
	m := append(st.msg[:0], version...)
	m = appendField(m, tagKeyHash, "")
	m = appendField(m, tagTenant, tenant)
	m = appendField(m, tagScope, scope)
	if principal != "" {
		m = appendField(m, tagPrincipal, principal)
	}
	if clientKey != "" {
		m = appendField(m, tagClientKey, clientKey)
	} else {
		m = appendField(m, tagInputs, canonicalInputs)
	}
	st.msg = m
	return st.digest()
}

// Fingerprint returns the hex HMAC of the tagged canonical inputs.
func (d *Deriver) Fingerprint(canonicalInputs []byte) string {
	st := d.pool.Get().(*macState)
	defer d.put(st)
	m := append(st.msg[:0], version...)
	m = appendField(m, tagFingerprint, "")
	st.msg = appendField(m, tagInputs, canonicalInputs)
	return st.digest()
}

// Actor returns the hex HMAC of the tagged actor name (a user id that may
// be personal data), for the audit trail.
func (d *Deriver) Actor(name string) string {
	st := d.pool.Get().(*macState)
	defer d.put(st)
	m := append(st.msg[:0], version...)
	st.msg = appendField(m, tagActor, name)
	return st.digest()
}

func (d *Deriver) put(st *macState) {
	if cap(st.msg) > maxPooledMsg {
		st.msg = make([]byte, 0, 256)
	}
	d.pool.Put(st)
}

// digest is the hex HMAC of st.msg.
func (st *macState) digest() string {
	st.h.Reset()
	st.h.Write(st.msg)
	hex.Encode(st.hex[:], st.h.Sum(st.sum[:0]))
	return string(st.hex[:])
}

// appendField appends one field of a tagged tuple: tag byte, 8-byte
// big-endian length, bytes.
func appendField[T string | []byte](m []byte, tag byte, b T) []byte {
	m = append(m, tag)
	m = binary.BigEndian.AppendUint64(m, uint64(len(b)))
	return append(m, b...)
}

// HashUserText returns the hex SHA-256 of s trimmed, with every run of white
// space collapsed to one space. Callers put this, never the raw text, into an
// operation's inputs.
func HashUserText(s string) string {
	normalized := strings.Join(strings.Fields(s), " ")
	b := sha256.Sum256([]byte(normalized))
	return hex.EncodeToString(b[:])
}

// ValidateClientKey reports whether k is 1–255 characters of [A-Za-z0-9_.:-].
func ValidateClientKey(k string) error {
	return validate(k, MaxClientKeyLen, ErrInvalidClientKey, "idempotency key")
}

// ValidateScope reports whether s is 1–255 characters of [A-Za-z0-9._:-].
func ValidateScope(s string) error {
	return validate(s, MaxScopeLen, ErrInvalidScope, "scope")
}

// Both alphabets are the same set: letters, digits and . _ : -
func allowedChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '-'
}

func validate(s string, maxLen int, sentinel error, what string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty", sentinel, what)
	case len(s) > maxLen:
		return fmt.Errorf("%w: %s is %d characters, at most %d allowed", sentinel, what, len(s), maxLen)
	}
	for i := 0; i < len(s); i++ {
		if !allowedChar(s[i]) {
			return fmt.Errorf("%w: %s has a character outside [A-Za-z0-9._:-] at position %d", sentinel, what, i+1)
		}
	}
	return nil
}

// Canonicalize returns the canonical JSON form of raw: object keys sorted at
// every level, numbers kept exactly as written, no insignificant white space,
// no HTML escaping. Canonicalize(Canonicalize(x)) == Canonicalize(x).
func Canonicalize(raw []byte) ([]byte, error) {
	// The fast path writes the same bytes without decoding into maps, or
	// declines; TestCanonicalFastPathMatches and FuzzCanonicalize hold it
	// to canonicalSlow, which defines the form (and so every stored key).
	if out, ok := jsonvalue.AppendCanonical(make([]byte, 0, len(raw)), raw); ok {
		return out, nil
	}
	return canonicalSlow(raw)
}

// canonicalSlow is Canonicalize through encoding/json's generic values.
func canonicalSlow(raw []byte) ([]byte, error) {
	v, err := decodeValue(raw)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Grow(len(raw))
	if err := writeCanonical(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeValue decodes raw as encoding/json's Decoder with UseNumber does
// (jsonvalue's fast path gives the same value, or declines).
func decodeValue(raw []byte) (any, error) {
	if v, ok := jsonvalue.Decode(raw); ok {
		return v, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidInputs, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after the JSON value", ErrInvalidInputs)
	}
	return v, nil
}

// CanonicalizeValue marshals v (json.RawMessage and []byte are taken as JSON
// text) and canonicalizes the result. A nil v is JSON null.
func CanonicalizeValue(v any) ([]byte, error) {
	switch t := v.(type) {
	case json.RawMessage:
		return Canonicalize(t)
	case []byte:
		return Canonicalize(t)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidInputs, err)
	}
	return Canonicalize(b)
}

func writeCanonical(buf *bytes.Buffer, v any) error {
	switch t := v.(type) {
	case map[string]any:
		names := make([]string, 0, len(t))
		for k := range t {
			names = append(names, k)
		}
		sort.Strings(names)
		buf.WriteByte('{')
		for i, k := range names {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeJSONString(buf, k)
			buf.WriteByte(':')
			if err := writeCanonical(buf, t[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case string:
		writeJSONString(buf, t)
	case json.Number:
		buf.WriteString(t.String())
	case bool:
		if t {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	case nil:
		buf.WriteString("null")
	default:
		return fmt.Errorf("%w: unexpected %T", ErrInvalidInputs, v)
	}
	return nil
}

func writeJSONString(buf *bytes.Buffer, s string) {
	if plainJSONString(s) {
		// What the encoder writes for it: the bytes, quoted.
		buf.WriteByte('"')
		buf.WriteString(s)
		buf.WriteByte('"')
		return
	}
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // a string always encodes
	buf.Truncate(buf.Len() - 1) // Encode appends '\n'
}

// plainJSONString reports whether encoding/json (HTML escaping off) writes s
// as its own bytes between quotes: printable ASCII other than '"' and '\\'.
// Control characters, non-ASCII (U+2028, U+2029, invalid UTF-8) and the two
// specials take the encoder's path.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// MaxSecretIDLen is the longest secret id (Config.SecretID, SecretVersion.ID).
const MaxSecretIDLen = 32

// ValidateSecretID reports whether id may name a secret: empty (the unnamed
// secret), or 1 to MaxSecretIDLen characters of [A-Za-z0-9._-].
func ValidateSecretID(id string) error {
	if len(id) > MaxSecretIDLen {
		return fmt.Errorf("secret id %q is longer than %d characters", id, MaxSecretIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("secret id %q holds a character outside [A-Za-z0-9._-]", id)
		}
	}
	return nil
}
