package pipeline

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
)

// Idempotent-Completed-At is FormatTime's text, RFC 3339 in UTC with the
// sub-second digits (none when zero, no trailing zeros), whatever the
// location and however long the year; the value's slice and text come in
// one allocation, and the slice holds only the value (an append copies).
func TestCompletedAtHeaderIsFormatTimeInOneAllocation(t *testing.T) {
	paris := time.FixedZone("CET", 3600)
	for _, at := range []time.Time{
		time.Date(2026, 11, 28, 10, 30, 0, 0, time.UTC),
		time.Date(2026, 11, 28, 10, 30, 5, 120_000_000, time.UTC),
		time.Date(2026, 12, 31, 23, 59, 59, 999_999_999, paris),
		time.Date(1999, 1, 2, 3, 4, 5, 6, time.Local),
		time.Date(12026, 1, 2, 3, 4, 5, 600_000_000, time.UTC),
		time.Date(-44, 3, 15, 12, 0, 0, 1, time.UTC),
	} {
		want := at.UTC().Format(time.RFC3339Nano)
		require.Equal(t, want, FormatTime(at))
		h := http.Header{}
		SetReplayed(h, true, at)
		require.Equal(t, []string{want}, h[HeaderCompletedAt], want)
		require.Equal(t, 1, cap(h[HeaderCompletedAt]))
		require.Equal(t, []string{"true"}, h[HeaderReplayed])
	}
	h := http.Header{}
	SetReplayed(h, true, time.Time{})
	require.Nil(t, h[HeaderCompletedAt])
	h = http.Header{}
	SetReplayed(h, false, time.Now())
	require.Empty(t, h)

	at := time.Date(2026, 11, 28, 10, 30, 5, 123_456_789, time.UTC)
	var sink []string
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() { sink = timeHeader(at) }))
	require.Equal(t, "2026-11-28T10:30:05.123456789Z", sink[0])
	sink = append(sink, "x")
	require.Equal(t, []string{"2026-11-28T10:30:05.123456789Z"}, timeHeader(at))
}

// Result answers a stored answer with its own Content-Type, and with JSON's
// when it has none or an empty one (as Header.Get == "" said).
func TestResultContentType(t *testing.T) {
	for _, c := range []struct {
		stored http.Header
		want   []string
	}{
		{nil, []string{ContentJSON}},
		{http.Header{"Content-Type": {""}}, []string{ContentJSON}},
		{http.Header{"Content-Type": {"text/plain"}}, []string{"text/plain"}},
		{http.Header{"Content-Type": {}}, []string{ContentJSON}},
	} {
		w := httptest.NewRecorder()
		res := idemguard.Result{Status: idemguard.StatusSucceeded, StatusCode: http.StatusOK, Body: []byte(`{}`), Header: c.stored}
		(&Answers{}).Result(w, Request{}, res)
		require.Equal(t, c.want, w.Header()["Content-Type"], c.stored)
	}
}
