package pipeline

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/live"
)

func TestSSEWriterFlushesEachEvent(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Length", "12")
	s := NewSSE(rec)
	require.NoError(t, s.Send(live.Event{ID: "1", Data: []byte(`{"a":1}`)}))
	require.True(t, rec.Flushed, "each event is flushed as it is written")
	require.NoError(t, s.Comment("keep-alive"))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "text/event-stream", rec.Header().Get("Content-Type"))
	require.Equal(t, "no-cache", rec.Header().Get("Cache-Control"))
	require.Empty(t, rec.Header().Get("Content-Length"))
	require.Equal(t, "id: 1\ndata: {\"a\":1}\n\n: keep-alive\n\n", rec.Body.String())
}
