package routers

import (
	"encoding/json"
	"testing"

	"github.com/idemguard/idemguard/internal/jsonvalue"
)

// FuzzDecodeDoorBody holds the door's body scan equal to decoding the body
// and encoding it again without the door's members: the same model and
// stream, and inputs of the same canonical form (so the same key and
// fingerprint), for every JSON object with unique member names.
func FuzzDecodeDoorBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[1]}`,
		` { "messages" : [ {"model":"inner"} ] , "model" : "m" , "stream" : true } `,
		`{"mod\u0065l":"m\"x","stream":null,"stream_options":{"include_usage":true},"t":1.50}`,
		`{"a":"}","model":"m","b":[",",{"c":"]"}],"d":"\\"}`,
		`{"model":"\u00e9\ud83d\ude00","x":[[],{},""]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			return // pipeline.Read refuses it first
		}
		v, ok := jsonvalue.DecodeUniqueKeys(body)
		obj, isObj := v.(map[string]any)
		if !ok || !isObj {
			// Not an object (refused), or a repeated member: the door's own
			// are refused, others left to the operation as the REST API
			// leaves them.
			return
		}
		got, err := decodeDoorBody(body)
		model, _ := obj["model"].(string)
		stream, _ := obj["stream"].(bool)
		_, isBool := obj["stream"].(bool)
		wantErr := model == "" || (obj["stream"] != nil && !isBool)
		if wantErr != (err != nil) {
			t.Fatalf("body %s: error %v, want error %t", body, err, wantErr)
		}
		if err != nil {
			return
		}
		if got.model != model || got.stream != stream {
			t.Fatalf("body %s: model %q stream %t, want %q %t", body, got.model, got.stream, model, stream)
		}
		for _, m := range doorMembers {
			delete(obj, m)
		}
		want, _ := json.Marshal(obj)
		wc, ok1 := jsonvalue.AppendCanonical(nil, want)
		gc, ok2 := jsonvalue.AppendCanonical(nil, got.inputs)
		if !ok1 || !ok2 || string(wc) != string(gc) {
			t.Fatalf("body %s: inputs %s, want %s", body, got.inputs, want)
		}
	})
}
