// Package sanitize is the response allowlist of idemguard: the only shape of
// an operation's result that is ever stored in the idempotency table or
// replayed to a caller.
//
// # Allowlist
//
// An operation's result (any JSON object) is reduced to an [Envelope] with
// these top-level fields, and nothing else:
//
//	ok                       bool      missing or not a bool → true
//	stopReason               enum      see [StopReason]; missing, "" or not a string →
//	                                   "completed" when ok, else "unknown";
//	                                   a value outside the enum → "unknown"
//	createdActionRequestIds  []int64   only numbers with an integral value that
//	                                   fits int64; at most 1000 entries
//	traceId                  string    at most 256 bytes, cut at a UTF-8 boundary
//	needsHuman               bool      missing or not a bool → false
//	cached                   bool      ignored on input; false when stored, set
//	                                   to true by the engine on replay
//	data                     object    values kept only when they are a string,
//	                                   bool, null or number, or an array of those
//	                                   (other array elements are removed);
//	                                   nested objects are dropped
//
// Every other top-level key is dropped; it is not moved into data. A field of
// the wrong type is treated as missing; sanitizing never fails for a JSON
// object. Empty data and empty createdActionRequestIds are omitted.
//
// # Blocked keys
//
// These keys are never stored, at any depth, compared case-insensitively
// ([strings.EqualFold]):
//
//	_internal  debug  prompt  systemPrompt  error  stack  provider  model  requestId
//
// At the top level they are dropped like every other unknown key; inside data
// the key and its value are dropped. Objects below data are dropped whole, so
// no deeper level exists.
//
// # Numbers
//
// Numbers are decoded without loss ([encoding/json.Decoder.UseNumber]) and
// rendered canonically, so that storing the envelope in a MySQL JSON column
// (which re-renders doubles) and sanitizing it again gives the same bytes:
// an integer literal that fits int64 keeps its digits ("-0" becomes "0");
// every other number becomes a float64 rendered by
// strconv.FormatFloat(f, 'g', -1, 64), or its integer digits when the value is
// integral and fits int64 ("1.50" → 1.5, "1e2" → 100,
// "12345678901234567890" → 1.2345678901234567e+19). A number that overflows
// float64 (e.g. 1e400) is dropped like a value of a disallowed type.
//
// # Encoding
//
// [Marshal] and [Policy.Encode] are deterministic: fields in [Envelope] order,
// data keys sorted, no HTML escaping, no trailing newline, invalid UTF-8
// replaced by U+FFFD. Sanitizing is idempotent: sanitizing the stored bytes
// again yields the same envelope and the same bytes. Send an envelope to a
// client as the bytes of [Marshal], not through another JSON encoder (HTML
// escaping or another float format would break byte-equal replays).
//
// # Size policy
//
// [Policy.Encode] keeps the stored envelope within Policy.MaxBytes
// (default [DefaultMaxBytes], 64 KiB; at least [MinMaxBytes], 1 KiB). When the
// encoded envelope is larger, data is dropped first; if it is still larger,
// createdActionRequestIds and traceId are dropped too. What remains (ok,
// stopReason, needsHuman, cached) always fits in 1 KiB, so the result is never
// over the limit. [Policy.EncodeReport] also says whether anything was dropped.
//
// All functions are safe for concurrent use.
package sanitize
