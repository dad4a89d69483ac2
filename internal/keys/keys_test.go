package keys

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/jsonvalue"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func newDeriver(t testing.TB) *Deriver {
	d, err := New(testSecret)
	require.NoError(t, err)
	return d
}

// The first row's key hash and fingerprint were also computed independently
// (Python hmac over the documented tagged encoding); a change to the encoding
// must show up here as a deliberate, versioned change.
var vectors = []struct {
	tenant, scope, clientKey, inputs string
	keyHash, fingerprint             string
}{
	{"acme", "actionRequests.aiProposeCopy", "order-123", `{"b":1,"a":"x"}`,
		"89ab1f4c92dba239e094dc2e2fa9ed2cfea9488d4a156635ca636e31e5053fac", "41255754acf7d02b1cb79090efc07ee7939da286d9c63ffaef5d91b156bdbd4d"},
	{"acme", "actionRequests.aiProposeCopy", "", `{"b":1,"a":"x"}`,
		"8d15ad363f6c8f5077d2f062c0574829c9fe11dff376c3cb6f3ddc6ee97307e0", "41255754acf7d02b1cb79090efc07ee7939da286d9c63ffaef5d91b156bdbd4d"},
	{"Acme", "actionRequests.aiProposeCopy", "", `{"b":1,"a":"x"}`,
		"cfe6a1352d14d4cd4bb9706952e2bd7e1b3fc3c583a144273fe6e8dff73b9bdf", "41255754acf7d02b1cb79090efc07ee7939da286d9c63ffaef5d91b156bdbd4d"},
	{"acme", "other.scope", "", `{"b":1,"a":"x"}`,
		"f564bfef787817eb86da02191f98c3509171da1fe4fee7505df804fd2f63d95c", "41255754acf7d02b1cb79090efc07ee7939da286d9c63ffaef5d91b156bdbd4d"},
	{"acme", "s", "", `null`,
		"504712c4873bd467d9949ae5820eef13fd0eeb5317e03555c71371c7c7a6bf6c", "fe5b72341d7aae2195418b68011512680f27bfefdc70db812527939721f9f142"},
	{"t-1", "s:x", "k", `[1,2.50,"é"]`,
		"6e71d7772dfcb91b8c1cf130adec802db586cddc0a69fd1501565d712eaeabde", "bca5bc495e566fb470ddf69ee48dabc5db13ac6ff1b9000d7ee909e403aa6b6e"},
}

func TestVectors(t *testing.T) {
	t.Parallel()
	d := newDeriver(t)
	for _, v := range vectors {
		t.Run(fmt.Sprintf("%s/%s/%s", v.tenant, v.scope, v.clientKey), func(t *testing.T) {
			c, err := Canonicalize([]byte(v.inputs))
			require.NoError(t, err)
			require.Equal(t, v.keyHash, d.KeyHash(v.tenant, v.scope, v.clientKey, c))
			require.Equal(t, v.fingerprint, d.Fingerprint(c))
		})
	}
}

func TestNewRejectsShortSecret(t *testing.T) {
	t.Parallel()
	_, err := New([]byte(strings.Repeat("x", MinSecretBytes-1)))
	require.ErrorIs(t, err, ErrShortSecret)
	_, err = New([]byte(strings.Repeat("x", MinSecretBytes)))
	require.NoError(t, err)
}

func TestSecretChangesEverything(t *testing.T) {
	t.Parallel()
	other, err := New([]byte("another secret that is 32+ bytes long!"))
	require.NoError(t, err)
	d := newDeriver(t)
	c := []byte(`{"a":1}`)
	require.NotEqual(t, d.KeyHash("t", "s", "k", c), other.KeyHash("t", "s", "k", c))
	require.NotEqual(t, d.Fingerprint(c), other.Fingerprint(c))
}

// Tuples that a naive concatenation ("t"+"s"+"k") would merge must differ.
func TestTaggedTuplesNeverCollide(t *testing.T) {
	t.Parallel()
	d := newDeriver(t)
	type tuple struct{ tenant, scope, key, inputs string }
	tuples := []tuple{
		{"ab", "c", "d", ""}, {"a", "bc", "d", ""}, {"a", "b", "cd", ""},
		{"a", "b:c", "d", ""}, {"a:b", "c", "d", ""},
		{"a", "b", "", `"d"`}, {"a", "b", "d", ""}, // client key vs inputs with the same bytes
		{"a", "b", "", `{"k":"d"}`}, {"a", "b", "", `["d"]`},
		{"a", "b", "", "null"}, {"a", "b", "null", ""},
		{"a.b", "c", "", "1"}, {"a", "b.c", "", "1"}, {"a", "b", "", "1"}, {"a", "b", "1", ""},
	}
	seen := map[string]tuple{}
	for _, tu := range tuples {
		h := d.KeyHash(tu.tenant, tu.scope, tu.key, []byte(tu.inputs))
		prev, dup := seen[h]
		require.False(t, dup, "collision between %+v and %+v", prev, tu)
		seen[h] = tu
	}
	// A fingerprint is never equal to a key hash over the same bytes.
	require.NotEqual(t, d.Fingerprint([]byte(`"d"`)), d.KeyHash("", "", "", []byte(`"d"`)))
}

func TestCanonicalize(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{" { \"z\" : [ 3 , {\"y\":1,\"x\":2} ] ,\n\t\"a\":null } ", `{"a":null,"z":[3,{"x":2,"y":1}]}`},
		{`1.50`, `1.50`}, // numbers as written
		{`1e3`, `1e3`},   // not re-rendered
		{`12345678901234567890123`, `12345678901234567890123`},
		{`"<a&b>"`, `"<a&b>"`}, // no HTML escaping
		{`"\u00e9"`, `"é"`},
		{`"tab\there"`, `"tab\there"`},
		{`true`, `true`},
		{`[]`, `[]`},
		{`{}`, `{}`},
	}
	for _, c := range cases {
		got, err := Canonicalize([]byte(c.in))
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, string(got), c.in)
	}
	for _, bad := range []string{``, `{`, `{"a":1}x`, `{"a":1} {"b":2}`, `nul`, `{'a':1}`} {
		_, err := Canonicalize([]byte(bad))
		require.ErrorIs(t, err, ErrInvalidInputs, bad)
	}
}

func TestCanonicalizeValue(t *testing.T) {
	t.Parallel()
	got, err := CanonicalizeValue(map[string]any{"b": []int{1, 2}, "a": "x"})
	require.NoError(t, err)
	require.Equal(t, `{"a":"x","b":[1,2]}`, string(got))
	got, err = CanonicalizeValue(json.RawMessage(`{"b":1, "a":1}`))
	require.NoError(t, err)
	require.Equal(t, `{"a":1,"b":1}`, string(got))
	got, err = CanonicalizeValue(nil)
	require.NoError(t, err)
	require.Equal(t, `null`, string(got))
	_, err = CanonicalizeValue(func() {})
	require.ErrorIs(t, err, ErrInvalidInputs)
}

func TestHashUserText(t *testing.T) {
	t.Parallel()
	base := HashUserText("write a haiku about the sea")
	require.Len(t, base, 64)
	for _, same := range []string{
		"  write a haiku about the sea  ",
		"write  a\thaiku\nabout the\r\nsea",
		"write a haiku about\u00a0the sea", // NBSP is white space too
		"\twrite a haiku about the sea\n",
	} {
		require.Equal(t, base, HashUserText(same), "%q", same)
	}
	for _, different := range []string{
		"Write a haiku about the sea", // case is kept
		"write a haiku about the sea.",
		"writea haiku about the sea",
	} {
		require.NotEqual(t, base, HashUserText(different), "%q", different)
	}
	// sha256("") for empty and all-white-space input.
	require.Equal(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", HashUserText(" \t\n"))
}

func TestValidateClientKeyAndScope(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "A-z_0.9:x", strings.Repeat("k", 255), "order:123"} {
		require.NoError(t, ValidateClientKey(ok), ok)
		require.NoError(t, ValidateScope(ok), ok)
	}
	for _, bad := range []string{"", strings.Repeat("k", 256), "a b", "a/b", "é", "a\x00", `"abc"`, "a,b"} {
		require.ErrorIs(t, ValidateClientKey(bad), ErrInvalidClientKey, "%q", bad)
		require.ErrorIs(t, ValidateScope(bad), ErrInvalidScope, "%q", bad)
	}
	err := ValidateClientKey("ab cd")
	require.ErrorContains(t, err, "position 3")
}

// TestCanonicalizeNumbers pins what the package doc promises about numbers:
// kept exactly as written, so spellings of one value are different inputs,
// and numbers beyond float64 are valid and kept digit for digit.
func TestCanonicalizeNumbers(t *testing.T) {
	t.Parallel()
	d := newDeriver(t)
	for _, n := range []string{
		"1e400", "-1e-400", "1E+308", "0.000000000000000000000000000000000000000000000001",
		strings.Repeat("9", 300), strings.Repeat("9", 300) + "e9", "-" + strings.Repeat("1", 400) + ".5",
	} {
		for _, in := range []string{n, `{"n":` + n + `}`, `[` + n + `,` + n + `]`} {
			got, err := Canonicalize([]byte(in))
			require.NoError(t, err, in)
			require.Equal(t, in, string(got), "a number beyond float64 must be kept as written")
		}
	}

	// Each pair is one value to float64 and two inputs to idemguard.
	for _, pair := range [][2]string{
		{"1.0", "1"}, {"1e2", "100"}, {"1E2", "1e2"}, {"1e+2", "1e2"}, {"-0", "0"}, {"0.10", "0.1"},
		{strings.Repeat("9", 300), "1e300"},
	} {
		a, err := Canonicalize([]byte(`{"n":` + pair[0] + `}`))
		require.NoError(t, err)
		b, err := Canonicalize([]byte(`{"n":` + pair[1] + `}`))
		require.NoError(t, err)
		require.Equal(t, `{"n":`+pair[0]+`}`, string(a))
		require.Equal(t, `{"n":`+pair[1]+`}`, string(b))
		require.NotEqual(t, d.Fingerprint(a), d.Fingerprint(b), "%s and %s", pair[0], pair[1])
		require.NotEqual(t, d.KeyHash("t", "s", "", a), d.KeyHash("t", "s", "", b), "%s and %s", pair[0], pair[1])
	}
}

// FuzzCanonicalize checks what the canonical form promises, for any input:
// it exists exactly for valid JSON, canonicalizing twice equals once, object
// keys are sorted at every level, there is no insignificant white space, and
// every value, numbers included, is kept as written (both sides decoded with
// UseNumber, so a number beyond float64 is not an error: see
// TestCanonicalizeNumbers and testdata/fuzz/FuzzCanonicalize).
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":2}`, `[1, 2.50, "x"]`, `{"a":{"c":[{"e":1,"d":2}],"b":null}}`, `"s"`, `0`, `-1e-7`, `{"":""}`, `{"a":1,"a":2}`,
		`{"n":1e400}`, `{"é":1,"e":2,"\u00e8":3}`, "\"\u2028<&>\t\"", "{\"a\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	d, err := New(testSecret)
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, raw []byte) {
		once, err := Canonicalize(raw)
		require.Equal(t, json.Valid(raw), err == nil, "Canonicalize must accept exactly valid JSON (err: %v)", err)
		requireFastPathMatches(t, raw)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidInputs)
			return
		}
		twice, err := Canonicalize(once)
		require.NoError(t, err)
		require.Equal(t, string(once), string(twice), "canonicalizing twice must equal once")

		require.True(t, utf8.Valid(once), "canonical form is not UTF-8: %q", once)
		var compact bytes.Buffer
		require.NoError(t, json.Compact(&compact, once))
		require.Equal(t, compact.String(), string(once), "insignificant white space in the canonical form")
		requireSortedKeys(t, once)
		// Same values, numbers compared as the text written (json.Number).
		require.Equal(t, decodeWithNumbers(t, raw), decodeWithNumbers(t, once), "the canonical form changed a value")

		// Re-encoding the same value with other key order and white space
		// never changes the key.
		reordered, err := json.MarshalIndent(reverseKeys(decodeWithNumbers(t, once)), "", "  ")
		require.NoError(t, err)
		c2, err := Canonicalize(reordered)
		require.NoError(t, err)
		require.Equal(t, string(once), string(c2))
		require.Equal(t, d.KeyHash("t", "s", "", once), d.KeyHash("t", "s", "", c2))
		require.Equal(t, d.Fingerprint(once), d.Fingerprint(c2))
	})
}

// decodeWithNumbers decodes JSON text with UseNumber: numbers stay the text
// written, whatever their size.
func decodeWithNumbers(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	return v
}

// requireSortedKeys walks the tokens of canonical JSON text and fails unless
// the keys of every object are in strictly increasing byte order.
func requireSortedKeys(t *testing.T, canonical []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(canonical))
	dec.UseNumber()
	type frame struct {
		object  bool
		wantKey bool   // in an object: the next token is a key
		last    string // the previous key of this object
		n       int    // keys seen
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		if top != nil && top.object && top.wantKey {
			if delim, ok := tok.(json.Delim); ok && delim == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			k := tok.(string)
			require.True(t, top.n == 0 || top.last < k, "keys out of order: %q then %q in %s", top.last, k, canonical)
			top.last, top.n, top.wantKey = k, top.n+1, false
			continue
		}
		if top != nil && top.object {
			top.wantKey = true // this token is (or opens) the member's value
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{object: true, wantKey: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
	require.Empty(t, stack)
}

// reverseKeys returns v with every object written as an ordered list of
// members in reverse key order, so the JSON text differs from the canonical one.
func reverseKeys(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := orderedObject{}
		for k, e := range t {
			out = append(out, member{k, reverseKeys(e)})
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = reverseKeys(e)
		}
		return out
	default:
		return v
	}
}

type member struct {
	k string
	v any
}
type orderedObject []member

func (o orderedObject) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteString("{ ")
	for i, m := range o {
		if i > 0 {
			b.WriteString(" ,\n ")
		}
		k, _ := json.Marshal(m.k)
		v, err := json.Marshal(m.v)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteString(" : ")
		b.Write(v)
	}
	b.WriteString(" }")
	return []byte(b.String()), nil
}

func BenchmarkKeyHash(b *testing.B) {
	d := newDeriver(b)
	c := []byte(`{"prompt_sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","n":1}`)
	b.ReportAllocs()
	for b.Loop() {
		_ = d.KeyHash("acme", "actionRequests.aiProposeCopy", "", c)
	}
}

// writeJSONString's fast path for plain strings must write exactly what the
// encoder writes (canonical inputs feed the HMACs): every single byte, and
// strings mixing plain and special characters.
func TestWriteJSONStringMatchesEncoder(t *testing.T) {
	t.Parallel()
	encode := func(s string) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		require.NoError(t, enc.Encode(s))
		return strings.TrimSuffix(b.String(), "\n")
	}
	cases := []string{"", "plain text 0-9 ~!@#$%^&*()_+{}|:<>?[];',./`", "a\"b", "a\\b", "tab\there", "nl\n",
		"\x7f", "é", "\u2028", "\u2029", "\xff", "<&>", "a\x00b"}
	for c := range 256 {
		cases = append(cases, string([]byte{byte(c)}), "x"+string([]byte{byte(c)})+"y")
	}
	for _, s := range cases {
		var b bytes.Buffer
		writeJSONString(&b, s)
		require.Equal(t, encode(s), b.String(), "string %q", s)
	}
}

// requireFastPathMatches fails when jsonvalue.AppendCanonical takes raw and
// writes other bytes than canonicalSlow, the definition of the form: a
// difference would change the key of inputs already stored.
func requireFastPathMatches(t *testing.T, raw []byte) bool {
	t.Helper()
	fast, ok := jsonvalue.AppendCanonical(nil, raw)
	if !ok {
		return false
	}
	slow, err := canonicalSlow(raw)
	require.NoError(t, err, "the fast path took %q; the slow path rejects it", raw)
	require.Equal(t, string(slow), string(fast), "input %q", raw)
	return true
}

func TestCanonicalFastPathMatches(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`, ` { "b" : 1 , "a" : [ 2 , { "d" : null , "c" : true } ] } `,
		`{"a":1,"a":2}`, `{"a":{"x":1},"b":0,"a":{"y":2}}`, `{"b":1,"a":2,"b":3,"a":4,"c":5}`,
		`{"é":1,"e":2,"\u00e8":3,"\u0065":4}`, `{"":"","\u0000":"\u001f"}`, "\"\u2028<&>\t\"", `"\ud83d\ude00"`,
		`[1, 2.50, -0, 1E+2, 1e-7, 0.0]`, `{"n":1e400}`, `[]`, `{}`, `[[],{},[{}]]`, `null`, `true`, `false`,
		`{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k0":0}`,
		"{\"a\":\"\xff\"}", "{\"a\":\"x\u2028y\u2029\"}", "{\"é\u2028\":\"é\"}", `{"a":1}x`, `{"a" 1}`, `[1,]`, `01`, `"\ud800"`, ``,
	} {
		requireFastPathMatches(t, []byte(s))
	}
	for _, s := range []string{`{"messages":[{"role":"user","content":"hi"}]}`, `{"b":1,"a":2,"b":3}`, `[{"z":"\u00e9"}]`} {
		require.True(t, requireFastPathMatches(t, []byte(s)), "the fast path takes %s", s)
	}
}

// A principal is a field of its own: two principals' identical requests and
// client keys name different keys; no principal is KeyHash's value; and a
// principal cannot be moved into the client key or the scope.
func TestPrincipalKeyHash(t *testing.T) {
	t.Parallel()
	d := newDeriver(t)
	c := []byte(`{"a":1}`)
	require.Equal(t, d.KeyHash("acme", "chat", "k", nil), d.PrincipalKeyHash("acme", "chat", "", "k", nil))
	require.Equal(t, d.KeyHash("acme", "chat", "", c), d.PrincipalKeyHash("acme", "chat", "", "", c))
	alice, mallory := d.PrincipalKeyHash("acme", "chat", "jwt:alice", "", c), d.PrincipalKeyHash("acme", "chat", "jwt:mallory", "", c)
	require.NotEqual(t, alice, mallory)
	require.NotEqual(t, alice, d.KeyHash("acme", "chat", "", c))
	require.NotEqual(t, d.PrincipalKeyHash("acme", "chat", "jwt:alice", "k", nil), d.PrincipalKeyHash("acme", "chat", "jwt:mallory", "k", nil))
	seen := map[string]string{}
	for _, tu := range [][3]string{{"chat", "p", "k"}, {"chat", "", "pk"}, {"chat", "pk", ""}, {"chatp", "", "k"}, {"chat", "p:k", ""}} {
		h := d.PrincipalKeyHash("acme", tu[0], tu[1], tu[2], c)
		require.NotContains(t, seen, h, "collision of %v with %s", tu, seen[h])
		seen[h] = fmt.Sprint(tu)
	}
}
