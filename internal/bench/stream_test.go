package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/tenancy"
)

// TestFloorStreamKeepsTheClientsConnection: the floor's stream ends its
// body in the write that carries [DONE], so a client that stops reading at
// [DONE] (as the suite's does) keeps its connection for the next stream,
// as it does with serve. Flushed on its own, [DONE] came before the body's
// end and about half the floor's streams dialed again.
func TestFloorStreamKeepsTheClientsConnection(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(streamUpstream))
	t.Cleanup(up.Close)
	key := "stream-floor-key-0123456789"
	a, err := auth.NewAuthenticator(map[tenancy.ID][]string{httpTenant: {auth.HashAPIKey(key)}})
	require.NoError(t, err)
	f := &floor{upstream: up.URL, client: &http.Client{Transport: loopbackTransport()}}
	srv := httptest.NewServer(f.handler(a))
	t.Cleanup(srv.Close)
	sb := &streamBench{apiKey: key, client: &http.Client{Transport: loopbackTransport(), Timeout: 30 * time.Second}}
	t.Cleanup(sb.client.CloseIdleConnections)

	var dialed atomic.Int64
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			if !i.Reused {
				dialed.Add(1)
			}
		},
	})
	const streams = 12
	for i := range streams {
		k := "floor-keep-" + strconv.Itoa(i)
		got, err := sb.do(ctx, streamReq{url: srv.URL + "/floor/stream/" + streamScope, key: k, content: k})
		require.NoError(t, err)
		require.Equal(t, streamChunks+2, got.events)
	}
	require.EqualValues(t, 1, dialed.Load(), "the floor's client dialed again after a stream ended at [DONE]")
}
