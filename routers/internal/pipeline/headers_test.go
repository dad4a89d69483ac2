package pipeline

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/keys"
)

func TestParseIdempotencyKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		values []string
		want   string
		err    error
	}{
		{"absent", nil, "", nil},
		{"token", []string{"order-123"}, "order-123", nil},
		{"all characters", []string{"Az09_.:-"}, "Az09_.:-", nil},
		{"sf-string", []string{`"order-123"`}, "order-123", nil},
		{"surrounding space", []string{" \torder-123 "}, "order-123", nil},
		{"sf-string with space", []string{` "abc" `}, "abc", nil},
		{"255 chars", []string{strings.Repeat("k", 255)}, strings.Repeat("k", 255), nil},
		{"256 chars", []string{strings.Repeat("k", 256)}, "", ErrInvalidKey},
		{"empty", []string{""}, "", ErrInvalidKey},
		{"blank", []string{"   "}, "", ErrInvalidKey},
		{"empty sf-string", []string{`""`}, "", ErrInvalidKey},
		{"lone quote", []string{`"`}, "", ErrInvalidKey},
		{"unterminated", []string{`"abc`}, "", ErrInvalidKey},
		{"trailing quote only", []string{`abc"`}, "", ErrInvalidKey},
		{"parameters", []string{`"abc";a=1`}, "", ErrInvalidKey},
		{"escape", []string{`"a\\b"`}, "", ErrInvalidKey},
		{"inner space", []string{"a b"}, "", ErrInvalidKey},
		{"list", []string{"a,b"}, "", ErrInvalidKey},
		{"tilde", []string{"~abc"}, "", ErrInvalidKey},
		{"slash", []string{"a/b"}, "", ErrInvalidKey},
		{"unicode", []string{"café"}, "", ErrInvalidKey},
		{"two headers", []string{"a", "a"}, "", ErrDuplicateKey},
		{"two empty headers", []string{"", ""}, "", ErrDuplicateKey},
	} {
		h := http.Header{}
		for _, v := range tc.values {
			h.Add("Idempotency-Key", v)
		}
		got, err := parseIdempotencyKey(h)
		if tc.err == nil {
			require.NoError(t, err, tc.name)
			require.Equal(t, tc.want, got, tc.name)
			continue
		}
		require.ErrorIs(t, err, tc.err, tc.name)
		require.Empty(t, got, tc.name)
		var re *RequestError
		require.True(t, errors.As(err, &re), tc.name)
		for _, v := range tc.values {
			if inner := strings.Trim(v, `" `); len(inner) > 4 { // shorter ones occur in any English sentence
				require.NotContains(t, re.detail, inner, "%s: the detail echoes the key", tc.name)
			}
		}
	}
}

func TestParsePreferWait(t *testing.T) {
	t.Parallel()
	const maxWait = 30 * time.Second
	for _, tc := range []struct {
		name    string
		values  []string
		want    time.Duration
		applied bool
	}{
		{"absent", nil, 0, false},
		{"wait", []string{"wait=5"}, 5 * time.Second, true},
		{"case and space", []string{"WAIT = 7"}, 7 * time.Second, true},
		{"quoted", []string{`wait="3"`}, 3 * time.Second, true},
		{"with others", []string{"respond-async, wait=4, handling=lenient"}, 4 * time.Second, true},
		{"second header", []string{"return=minimal", "wait=2"}, 2 * time.Second, true},
		{"first wins", []string{"wait=2, wait=9"}, 2 * time.Second, true},
		{"first wins across headers", []string{"wait=2", "wait=9"}, 2 * time.Second, true},
		{"first invalid wins", []string{"wait=x, wait=9"}, 0, false},
		{"capped", []string{"wait=31"}, maxWait, true},
		{"huge", []string{"wait=99999999999999999999999"}, maxWait, true},
		{"leading zeros", []string{"wait=0005"}, 5 * time.Second, true},
		{"zero", []string{"wait=0"}, 0, false},
		{"negative", []string{"wait=-1"}, 0, false},
		{"fraction", []string{"wait=1.5"}, 0, false},
		{"no value", []string{"wait"}, 0, false},
		{"empty value", []string{"wait="}, 0, false},
		{"parameter", []string{"wait=5;foo=bar"}, 5 * time.Second, true},
		{"quoted comma elsewhere", []string{`foo="a,wait=9", wait=3`}, 3 * time.Second, true},
		{"other preference named like wait", []string{"waiting=5"}, 0, false},
	} {
		h := http.Header{}
		for _, v := range tc.values {
			h.Add("Prefer", v)
		}
		got, applied := parsePreferWait(h, maxWait)
		require.Equal(t, tc.want, got, tc.name)
		require.Equal(t, tc.applied, applied, tc.name)
	}
	// A cap below a second still waits, and is reported rounded up.
	got, applied := parsePreferWait(http.Header{"Prefer": {"wait=5"}}, 500*time.Millisecond)
	require.True(t, applied)
	require.Equal(t, 500*time.Millisecond, got)
	require.Equal(t, "wait=1", PreferenceApplied(got))
	require.Equal(t, "wait=30", PreferenceApplied(maxWait))
}

func TestRetryAfterSeconds(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		time.Millisecond: "1", time.Second: "1", 1500 * time.Millisecond: "2", 5 * time.Second: "5", time.Minute: "60",
	} {
		require.Equal(t, want, RetryAfterSeconds(d), d)
	}
}

func FuzzParseIdempotencyKey(f *testing.F) {
	for _, s := range []string{"order-123", `"order-123"`, `""`, `"`, `"a\"b"`, "a,b", " x ", strings.Repeat("k", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, err := parseIdempotencyKey(http.Header{"Idempotency-Key": {v}})
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidKey)
			require.Empty(t, got)
			return
		}
		// Whatever is accepted is a valid client key, and parses to itself
		// both bare and quoted.
		require.NoError(t, keys.ValidateClientKey(got))
		for _, form := range []string{got, `"` + got + `"`} {
			again, err := parseIdempotencyKey(http.Header{"Idempotency-Key": {form}})
			require.NoError(t, err)
			require.Equal(t, got, again)
		}
	})
}

func FuzzParsePreferWait(f *testing.F) {
	for _, s := range []string{"wait=5", `wait="5", respond-async`, `a="x,\"y", wait=1`, "wait=99999999999", "wait=-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		const maxWait = 10 * time.Second
		got, applied := parsePreferWait(http.Header{"Prefer": {v}}, maxWait)
		require.GreaterOrEqual(t, got, time.Duration(0))
		require.LessOrEqual(t, got, maxWait)
		require.Equal(t, applied, got > 0)
	})
}

func TestPreferRespondAsyncParsing(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"respond-async": true, "Respond-Async": true, "wait=5, respond-async": true, "respond-async; x=1": true,
		"": false, "respond-asyncx": false, `a="respond-async"`: false, "wait=5": false,
	} {
		h := http.Header{}
		h.Set("Prefer", v)
		require.Equal(t, want, PrefersAsync(h), "%q", v)
	}
}
