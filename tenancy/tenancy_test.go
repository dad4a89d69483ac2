package tenancy

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestParseID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		in      string
		wantErr string // substring of the error; "" means valid
	}{
		{"one char", "a", ""},
		{"lower", "abcdefghijklmnopqrstuvwxyz", ""},
		{"upper", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", ""},
		{"digits", "0123456789", ""},
		{"dot", ".", ""},
		{"underscore", "_", ""},
		{"hyphen", "-", ""},
		{"mixed", "Acme-Corp_eu.1", ""},
		{"64 chars", strings.Repeat("a", 64), ""},
		{"empty", "", "empty"},
		{"65 chars", strings.Repeat("a", 65), "65 bytes long, at most 64"},
		{"very long", strings.Repeat("b", 10000), "10000 bytes long"},
		{"space", "acme corp", `' ' (U+0020) at position 4`},
		{"leading space", " acme", "position 0"},
		{"trailing space", "acme ", "position 4"},
		{"tab", "a\tb", `'\t' (U+0009) at position 1`},
		{"newline", "a\n", "position 1"},
		{"nul", "a\x00", "U+0000"},
		{"colon", "a:b", `':' (U+003A)`},
		{"slash", "a/b", "position 1"},
		{"plus", "a+b", "position 1"},
		{"at", "a@b", "position 1"},
		{"unicode letter", "acmé", `'é' (U+00E9) at position 3`},
		{"unicode digit", "١", "U+0661"},
		{"emoji", "a😀", "U+1F600"},
		{"fullwidth", "ａ", "U+FF41"},
		{"invalid utf8", "a\xffb", "byte 0xFF (invalid UTF-8) at position 1"},
		{"64 bytes of multibyte", strings.Repeat("é", 32), "position 0"},
		{"65 chars with bad char", strings.Repeat("a", 64) + " ", "65 bytes long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id, err := ParseID(tc.in)
			if tc.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, ID(tc.in), id)
				require.Equal(t, tc.in, id.String())
				require.True(t, id.Valid())
				return
			}
			require.ErrorIs(t, err, ErrInvalidID)
			require.Contains(t, err.Error(), tc.wantErr)
			require.Empty(t, id)
			require.False(t, ID(tc.in).Valid())
		})
	}
}

func TestParseIDNeverTruncates(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 64) + "SECRETTAIL"
	_, err := ParseID(long)
	require.ErrorIs(t, err, ErrInvalidID)
	require.NotContains(t, err.Error(), "SECRETTAIL", "error echoes more than 64 bytes")
	require.Contains(t, err.Error(), strings.Repeat("a", 64))
}

func TestParseIDEveryByte(t *testing.T) {
	t.Parallel()
	for c := 0; c < 256; c++ {
		allowed := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		_, err := ParseID("x" + string([]byte{byte(c)}))
		require.Equal(t, allowed, err == nil, "byte 0x%02X", c)
	}
}

func TestParseIDDoesNotAllocate(t *testing.T) {
	// Not parallel: AllocsPerRun is disturbed by concurrent tests.
	s := strings.Repeat("Ab9._-", 10)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := ParseID(s); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

func TestContext(t *testing.T) {
	t.Parallel()
	_, ok := FromContext(context.Background())
	require.False(t, ok)

	id, err := ParseID("acme")
	require.NoError(t, err)
	ctx := WithTenant(context.Background(), id)
	got, ok := FromContext(ctx)
	require.True(t, ok)
	require.Equal(t, id, got)

	// The innermost tenant wins.
	got, ok = FromContext(WithTenant(ctx, "other"))
	require.True(t, ok)
	require.Equal(t, ID("other"), got)

	// An empty or unvalidated ID is never reported.
	for _, bad := range []ID{"", "bad id", ID(strings.Repeat("a", 65))} {
		got, ok = FromContext(WithTenant(ctx, bad))
		require.False(t, ok, "%q", bad)
		require.Empty(t, got)
	}

	// A plain string under another key is not a tenant.
	type otherKey struct{}
	_, ok = FromContext(context.WithValue(context.Background(), otherKey{}, "acme"))
	require.False(t, ok)
}

func BenchmarkParseID(b *testing.B) {
	b.ReportAllocs()
	s := "tenant-acme_corp.eu-west-1"
	for b.Loop() {
		if _, err := ParseID(s); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParseID checks that ParseID accepts exactly the valid IDs, unchanged,
// and that its error holds no more of the input than the documented bounded,
// escaped prefix: the first MaxIDLen bytes, quoted by strconv.Quote. It does
// not look for raw substrings of the input in the message: escaping can
// recreate them (63 zeros and two backslashes quote to a string that holds
// the raw 65 bytes; testdata/fuzz/FuzzParseID keeps that input).
func FuzzParseID(f *testing.F) {
	for _, s := range []string{"a", "acme corp", strings.Repeat("a", 64), strings.Repeat("a", 65), "acmé", "a\xff", "",
		strings.Repeat("\xff", 70), strings.Repeat("\\", 66), "a\nb", strings.Repeat("é", 40)} {
		f.Add(s)
	}
	// maxProse bounds the message around the quoted prefix.
	const maxProse = 200
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseID(s)
		if err == nil {
			require.Equal(t, s, id.String()) // never truncated
			require.True(t, id.Valid())
			again, err := ParseID(id.String())
			require.NoError(t, err)
			require.Equal(t, id, again)
			return
		}
		require.ErrorIs(t, err, ErrInvalidID)
		require.False(t, ID(s).Valid())
		msg := err.Error()

		// Escaped: no control character or invalid UTF-8 reaches a log line.
		require.True(t, utf8.ValidString(msg), "%q", msg)
		for _, r := range msg {
			require.True(t, strconv.IsPrint(r), "unescaped %U in %q", r, msg)
		}
		// Bounded: at most the quoted first MaxIDLen bytes, plus prose.
		if s != "" {
			quoted := strconv.Quote(s[:min(len(s), MaxIDLen)])
			require.Contains(t, msg, quoted)
			require.LessOrEqual(t, len(strings.Replace(msg, quoted, "", 1)), maxProse, "%q", msg)
		} else {
			require.LessOrEqual(t, len(msg), maxProse)
		}
		// Nothing past the prefix: another tail of the same length gives
		// the same message.
		if len(s) > MaxIDLen {
			for _, fill := range []string{"a", "\\"} {
				other := s[:MaxIDLen] + strings.Repeat(fill, len(s)-MaxIDLen)
				_, err := ParseID(other)
				require.EqualError(t, err, msg, "the message depends on bytes past the first %d", MaxIDLen)
			}
		}
	})
}
