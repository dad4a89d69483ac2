package sanitize

import (
	"bytes"
	"cmp"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func FuzzSanitize(f *testing.F) {
	for _, tc := range fieldCases {
		f.Add([]byte(tc.in))
	}
	for _, tc := range numberCases {
		f.Add([]byte(`{"data":{"n":` + tc.in + `},"createdActionRequestIds":[` + tc.in + `]}`))
	}
	for _, k := range BlockedKeys() {
		f.Add([]byte(`{"` + k + `":1,"data":{"` + strings.ToUpper(k) + `":"v","x":[{"` + k + `":1}]}}`))
	}
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"data":{"t":"` + strings.Repeat("x", 2000) + `"},"traceId":"` + strings.Repeat("é", 200) + `"}`))

	policies := []Policy{{}, {MaxBytes: MinMaxBytes}}
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := FromJSON(in)
		if err != nil {
			trimmed := bytes.TrimLeft(in, " \t\r\n")
			if json.Valid(in) && len(trimmed) > 0 && trimmed[0] == '{' {
				t.Fatalf("FromJSON rejected a valid JSON object: %v", err)
			}
			return
		}
		require.True(t, json.Valid(in), "FromJSON accepted invalid JSON")
		require.False(t, e.Cached)
		require.True(t, e.StopReason.Valid())
		require.LessOrEqual(t, len(e.CreatedActionRequestIDs), MaxActionRequestIDs)
		require.LessOrEqual(t, len(e.TraceID), MaxTraceIDBytes)

		for _, p := range policies {
			out, err := p.Encode(e)
			require.NoError(t, err)
			require.True(t, json.Valid(out), "invalid output %q", out)
			require.LessOrEqual(t, len(out), cmp.Or(p.MaxBytes, DefaultMaxBytes))
			require.Empty(t, blockedKeysIn(t, out), "blocked key in %s", out)

			e2, err := FromJSON(out)
			require.NoError(t, err)
			out2, err := p.Encode(e2)
			require.NoError(t, err)
			require.Equal(t, string(out), string(out2), "not idempotent")
			m2, err := Marshal(e2)
			require.NoError(t, err)
			require.Equal(t, string(out), string(m2), "Marshal differs from Encode")
		}

		// Sanitizing twice is sanitizing once (no size policy involved).
		m1, err := Marshal(e)
		require.NoError(t, err)
		e2, err := FromJSON(m1)
		require.NoError(t, err)
		require.Equal(t, e, e2)
	})
}

// typicalEnvelope is a ~1 KiB operation result with some fields to drop.
var typicalEnvelope = []byte(`{
  "ok": true,
  "stopReason": "completed",
  "createdActionRequestIds": [101, 102, 103, 104],
  "traceId": "4bf92f3577b34da6a3ce929d0e0e4736",
  "needsHuman": false,
  "model": "gpt-4o-mini",
  "prompt": "Write three subject lines for the spring campaign of our shoe store.",
  "usage": {"prompt_tokens": 512, "completion_tokens": 128},
  "data": {
    "title": "Spring into comfort",
    "subtitle": "New arrivals for every step of your day",
    "body": "Our spring collection is here: breathable sneakers, waterproof boots and sandals that go the distance. Free shipping over $50, free returns for 30 days.",
    "variants": ["Spring into comfort", "Step into spring", "Fresh steps for a fresh season", {"bad": 1}],
    "score": 0.8750,
    "tokens": 128,
    "language": "en",
    "approved": false,
    "reviewer": null,
    "debug": {"latencyMs": 1234},
    "requestId": "req_abc123",
    "meta": {"nested": true},
    "tags": ["retail", "email", "spring", 2026]
  }
}`)

func BenchmarkSanitize(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(typicalEnvelope)))
	for b.Loop() {
		e, err := FromJSON(typicalEnvelope)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := (Policy{}).Encode(e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFromJSON(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(typicalEnvelope)))
	for b.Loop() {
		if _, err := FromJSON(typicalEnvelope); err != nil {
			b.Fatal(err)
		}
	}
}
