package jsonvalue

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// reference is what encoding/json gives: one value with UseNumber, then
// nothing but white space.
func reference(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

var seeds = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1.5e+10`, `-12.25E-3`, `"x"`,
	`{"ok":true,"stopReason":"completed","traceId":"t","needsHuman":false,"cached":false,"data":{"a":"b","n":1,"f":0.5,"l":["x",1,null,true]}}`,
	` {"a" : [ 1 , {"b":[]} ] } `, `{"a":1,"a":2}`, `{"k":"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00"}`,
	`{"k":"é日本"}`, `[1,2,3,[4,[5,[6]]]]`, `{"a":"\u2028\u2029<>&"}`,
	// Not handled or invalid: the reference decides.
	`{"k":"\ud83d"}`, `{"k":"\udc00x"}`, "{\"k\":\"\xff\"}", `{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `-`, `1e`,
	`{"a":1} x`, `{"a":1}{}`, `tru`, `nul`, `"unterminated`, "\"ctl\x01\"", `{"a" 1}`, `{1:2}`, `[`, ``, `  `,
	`{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12g4"}`, `1E5`, `-0.0e-0`, `[-]`, `{"a":tRue}`,
}

func TestDecodeMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	handled := 0
	for _, s := range seeds {
		want, werr := reference([]byte(s))
		got, ok := Decode([]byte(s))
		if !ok {
			continue
		}
		handled++
		require.NoError(t, werr, "Decode accepted %q, encoding/json rejects it", s)
		require.Equal(t, want, got, "input %q", s)
	}
	require.Greater(t, handled, 15, "the fast path must handle the common documents")
}

func TestDecodeHandlesEnvelopes(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		`{"ok":true,"stopReason":"completed","needsHuman":false,"cached":false,"data":{"text":"Line one\nline \"two\"","total_tokens":20}}`,
		`{"messages":[{"role":"user","content":"replay 12"}]}`,
	} {
		_, ok := Decode([]byte(s))
		require.True(t, ok, s)
	}
}

func TestDecodeDepthLimit(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", MaxDepth+2) + strings.Repeat("]", MaxDepth+2)
	_, ok := Decode([]byte(deep))
	require.False(t, ok)
	_, err := reference([]byte(deep))
	require.NoError(t, err, "encoding/json decodes it; the caller falls back")
}

func FuzzDecodeMatchesEncodingJSON(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := Decode(b)
		if !ok {
			return
		}
		want, err := reference(b)
		if err != nil {
			t.Fatalf("Decode accepted %q, encoding/json rejects it: %v", b, err)
		}
		require.Equal(t, want, got)
	})
}

func BenchmarkDecode(b *testing.B) {
	doc := []byte(seeds[10])
	b.Run("jsonvalue", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := Decode(doc); !ok {
				b.Fatal("not handled")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reference(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestDecodeUniqueKeys(t *testing.T) {
	t.Parallel()
	for _, s := range seeds {
		v, ok := Decode([]byte(s))
		u, uok := DecodeUniqueKeys([]byte(s))
		if uok {
			require.True(t, ok, "input %q", s)
			require.Equal(t, v, u, "input %q", s)
		}
	}
	for _, s := range []string{`{"a":1,"a":2}`, `[{"x":{"b":1,"b":1}}]`, `{"a":1,"\u0061":2}`} {
		_, ok := Decode([]byte(s))
		require.True(t, ok, "Decode takes %q (the last member wins)", s)
		_, ok = DecodeUniqueKeys([]byte(s))
		require.False(t, ok, "DecodeUniqueKeys declines the repeated member of %q", s)
	}
	_, ok := DecodeUniqueKeys([]byte(`{"a":{"b":1},"c":{"b":2}}`))
	require.True(t, ok, "the same name in two objects is not a repeat")
}

// takeReference is TakeCanonical as DecodeUniqueKeys, deleting the members
// and encoding/json's Encoder (HTML escaping off) give it.
func takeReference(t *testing.T, b []byte, names ...string) (rest []byte, taken [][]byte, ok bool) {
	v, ok := DecodeUniqueKeys(b)
	obj, isObj := v.(map[string]any)
	if !ok || !isObj {
		return nil, nil, false
	}
	encode := func(v any) []byte {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		require.NoError(t, enc.Encode(v))
		return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	taken = make([][]byte, len(names))
	for i, n := range names {
		if x, has := obj[n]; has {
			taken[i] = encode(x)
			delete(obj, n)
		}
	}
	return encode(obj), taken, true
}

var takeSeeds = []string{
	`{"messages":[1],"stream":true,"stream_options":{"include_usage":true}}`, `{"stream":false,"messages":[1]}`,
	`{"t":1.50,"stream":true}`, `["stream"]`, `{"stream":true,"stream":false}`, `{"stream":"yes"}`, `{"stream":true}`,
	` { "z" : {"b":1,"a":[{"d":"<&>","c":"\u2028"}]} , "stream" : true , "a":"\u00e9\ud83d\ude00" } `,
	`{"x":{"stream":true}}`, `{"x":{"b":1,"b":2},"stream":true}`, `{"stream":true} x`, `"stream"`,
	`{"stream":null,"stream_options":[]}`, `{"stream\u0020":true,"s":"\"\\\/\b\f\n\r\t"}`,
}

// TakeCanonical is the members deleted from DecodeUniqueKeys' map and the
// map encoded by encoding/json: the same rest, the same values taken, the
// same documents declined.
func TestTakeCanonicalMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range append(takeSeeds, seeds...) {
		checkTake(t, []byte(s))
	}
}

func FuzzTakeCanonicalMatchesEncodingJSON(f *testing.F) {
	for _, s := range append(takeSeeds, seeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(checkTake)
}

func checkTake(t *testing.T, b []byte) {
	names := []string{"stream", "stream_options"}
	rest, taken, ok := TakeCanonical(b, names...)
	wantRest, wantTaken, wantOK := takeReference(t, b, names...)
	require.Equal(t, wantOK, ok, "input %q", b)
	require.Equal(t, string(wantRest), string(rest), "input %q", b)
	require.Equal(t, len(wantTaken), len(taken), "input %q", b)
	for i := range wantTaken {
		require.Equal(t, string(wantTaken[i]), string(taken[i]), "input %q: %s", b, names[i])
		require.Equal(t, wantTaken[i] == nil, taken[i] == nil, "input %q: %s", b, names[i])
	}
}

// BenchmarkAppendCanonical is a chat body made canonical.
func BenchmarkAppendCanonical(b *testing.B) {
	doc := []byte(`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"stream 7"}],"temperature":0.2}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := AppendCanonical(make([]byte, 0, len(doc)), doc); !ok {
			b.Fatal("declined")
		}
	}
}

// TestAppendCanonicalCopiesAsideOnce: the values of a document's objects
// are copied aside in one buffer, allocated once, and not at all for a
// document without objects.
func TestAppendCanonicalCopiesAsideOnce(t *testing.T) {
	for doc, want := range map[string]float64{
		`{"messages":[{"role":"user","content":"fresh 1"},{"role":"system","content":"be brief, and nested"}],"z":{"a":{"b":1}}}`: 1,
		`["a",1,true,null]`: 0,
	} {
		b, dst := []byte(doc), make([]byte, 0, 2*len(doc))
		if n := testing.AllocsPerRun(100, func() {
			if _, ok := AppendCanonical(dst, b); !ok {
				t.Fatal("declined")
			}
		}); n != want {
			t.Errorf("%s: %v allocations, want %v", doc, n, want)
		}
	}
}
