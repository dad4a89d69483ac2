package sanitize

import (
	"cmp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		max int
		ok  bool
	}{
		{0, true},
		{MinMaxBytes, true},
		{DefaultMaxBytes, true},
		{1 << 30, true},
		{MinMaxBytes - 1, false},
		{1, false},
		{-1, false},
	} {
		err := Policy{MaxBytes: tc.max}.Validate()
		if tc.ok {
			require.NoError(t, err, "MaxBytes %d", tc.max)
			continue
		}
		require.Error(t, err, "MaxBytes %d", tc.max)
		require.Contains(t, err.Error(), "MaxBytes")
		_, err = Policy{MaxBytes: tc.max}.Encode(Failure(Completed))
		require.Error(t, err)
	}
}

func bigEnvelope(dataBytes, ids int) Envelope {
	e := Envelope{OK: true, StopReason: Completed, TraceID: strings.Repeat("t", MaxTraceIDBytes), NeedsHuman: true}
	for i := range ids {
		e.CreatedActionRequestIDs = append(e.CreatedActionRequestIDs, int64(1e15)+int64(i))
	}
	if dataBytes > 0 {
		e.Data = map[string]any{"text": strings.Repeat("d", dataBytes)}
	}
	return e
}

func TestPolicySize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                 string
		policy               Policy
		e                    Envelope
		dropped              bool
		keepData, keepIDsTID bool
	}{
		{"small fits default", Policy{}, bigEnvelope(100, 3), false, true, true},
		{"exactly at default limit keeps all", Policy{}, Envelope{}, false, true, true}, // filled in below
		{"data over default dropped", Policy{}, bigEnvelope(DefaultMaxBytes, 3), true, false, true},
		{"ids over 1KiB dropped too", Policy{MaxBytes: MinMaxBytes}, bigEnvelope(10, MaxActionRequestIDs), true, false, false},
		{"data over 1KiB, ids fit", Policy{MaxBytes: MinMaxBytes}, bigEnvelope(2000, 5), true, false, true},
		{"fits 1KiB", Policy{MaxBytes: MinMaxBytes}, bigEnvelope(100, 5), false, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			limit := cmp.Or(tc.policy.MaxBytes, DefaultMaxBytes)
			e := tc.e
			if tc.name == "exactly at default limit keeps all" {
				e = exactSize(t, limit)
			}
			b, dropped, err := tc.policy.EncodeReport(e)
			require.NoError(t, err)
			require.LessOrEqual(t, len(b), limit)
			require.Equal(t, tc.dropped, dropped)
			got, err := FromJSON(b)
			require.NoError(t, err)
			require.Equal(t, tc.keepData, got.Data != nil)
			require.Equal(t, tc.keepIDsTID, got.TraceID != "")
			require.Equal(t, tc.keepIDsTID, got.CreatedActionRequestIDs != nil)
			// Never dropped: ok, stopReason, needsHuman.
			require.Equal(t, e.OK, got.OK)
			require.Equal(t, e.StopReason, got.StopReason)
			require.Equal(t, e.NeedsHuman, got.NeedsHuman)
			require.False(t, got.Cached)

			plain, err := tc.policy.Encode(e)
			require.NoError(t, err)
			require.Equal(t, b, plain)

			again, dropped, err := tc.policy.EncodeReport(got)
			require.NoError(t, err)
			require.False(t, dropped)
			require.Equal(t, string(b), string(again))
		})
	}
}

// exactSize returns an envelope whose stored encoding is exactly limit bytes.
func exactSize(t *testing.T, limit int) Envelope {
	t.Helper()
	e := bigEnvelope(1, 1)
	b, err := Marshal(e)
	require.NoError(t, err)
	e.Data["text"] = strings.Repeat("d", 1+limit-len(b))
	b, err = Marshal(e)
	require.NoError(t, err)
	require.Len(t, b, limit)
	return e
}

func TestPolicyMinimalEnvelopeFits(t *testing.T) {
	t.Parallel()
	for _, r := range StopReasons() {
		e := Envelope{OK: false, StopReason: r, NeedsHuman: true, Cached: true}
		b, err := Marshal(e)
		require.NoError(t, err)
		require.Less(t, len(b), MinMaxBytes/4)
	}
}

func TestEncodeRejectsUnencodable(t *testing.T) {
	t.Parallel()
	_, err := Policy{}.Encode(Envelope{Data: map[string]any{"c": make(chan int)}})
	require.Error(t, err)
	_, err = Marshal(Envelope{Data: map[string]any{"c": make(chan int)}})
	require.Error(t, err)
}
