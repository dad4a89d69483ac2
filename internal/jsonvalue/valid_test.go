package jsonvalue

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

var jsonValidCases = []string{
	`{"messages":[{"role":"user","content":"replay 7"}]}`, `{}`, `[]`, ` { } `, `[1,2,3]`, `{"a":{"b":[true,false,null]}}`,
	`"x"`, `0`, `-0`, `-0.5e+10`, `1E5`, `12.0e-3`, `123`, `"\u00e9\"\\\/\b\f\n\r\t"`, "\t\r\n[ 1 , {\"a\" : 2} ]\n",
	`{"a":1,}`, `[1,]`, `[,1]`, `{"a"}`, `{"a":}`, `{a:1}`, `{"a":1 "b":2}`, `01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `--1`,
	`"abc`, `"a\x"`, `"\u12"`, `"\u12g4"`, "\"a\x01\"", `tru`, `nul`, `falsey`, `[1] [2]`, `{"a":1}}`, `]`, `}`, `[}`, `{]`,
	``, ` `, `{"a":[1,2}`, `[[[[]]]]`, strings.Repeat("[", 64) + strings.Repeat("]", 64), strings.Repeat("[", 65) + strings.Repeat("]", 65),
	`NaN`, `Infinity`, `"é"`, `{"":""}`, `[1e400]`, `1 2`, `{"a":1,"a":2}`,
}

// SurelyValid accepts only what json.Valid accepts, and every body
// json.Valid accepts that is not nested deeper than its stack; Valid is
// json.Valid.
func TestSurelyValidIsJSONValid(t *testing.T) {
	for _, c := range jsonValidCases {
		checkSurelyValid(t, []byte(c))
	}
	if !SurelyValid([]byte(jsonValidCases[0])) {
		t.Fatal("the bench's body takes the slow path")
	}
}

func FuzzValid(f *testing.F) {
	for _, c := range jsonValidCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkSurelyValid(t, b) })
}

func checkSurelyValid(t *testing.T, b []byte) {
	t.Helper()
	if Valid(b) != json.Valid(b) {
		t.Fatalf("Valid(%q) = %t, json.Valid %t", b, !json.Valid(b), json.Valid(b))
	}
	if !utf8.Valid(b) {
		return // SurelyValid's caller checks it before
	}
	got, want := SurelyValid(b), json.Valid(b)
	deep := strings.Count(string(b), "[")+strings.Count(string(b), "{") > maxFastDepth
	if got && !want || want && !got && !deep {
		t.Fatalf("SurelyValid(%q) = %t, json.Valid %t", b, got, want)
	}
}
