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

	"github.com/idemguard/idemguard/internal/testdb"
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

// TestClaimedFloorStreamClaimsBeforeItRelays: the claimed relay
// (floor-stream-claimed) relays the whole stream after its claim, leaves
// the row succeeded under its nonce, and answers a second request for the
// key 409 without calling the upstream: it pays one claim round trip
// before the upstream, as a guarded stream does.
func TestClaimedFloorStreamClaimsBeforeItRelays(t *testing.T) {
	db := testdb.New(t)
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		streamUpstream(w, r)
	}))
	t.Cleanup(up.Close)
	key := "stream-floor-key-0123456789"
	a, err := auth.NewAuthenticator(map[tenancy.ID][]string{httpTenant: {auth.HashAPIKey(key)}})
	require.NoError(t, err)
	f := &floor{db: db.DB, upstream: up.URL, client: &http.Client{Transport: loopbackTransport()}}
	srv := httptest.NewServer(f.handler(a))
	t.Cleanup(srv.Close)
	sb := &streamBench{apiKey: key, client: &http.Client{Transport: loopbackTransport(), Timeout: 30 * time.Second}}
	t.Cleanup(sb.client.CloseIdleConnections)

	url := srv.URL + "/floor/stream-claimed/" + streamScope
	got, err := sb.do(context.Background(), streamReq{url: url, key: "claimed-1", content: "claimed 1"})
	require.NoError(t, err)
	require.Equal(t, streamChunks+2, got.events)
	var status string
	require.NoError(t, db.DB.QueryRowContext(context.Background(),
		`SELECT status FROM idempotency_keys WHERE tenant = ? AND scope = ?`, string(httpTenant), streamScope).Scan(&status))
	require.Equal(t, "succeeded", status)

	_, err = sb.do(context.Background(), streamReq{url: url, key: "claimed-1", content: "claimed 1"})
	require.ErrorContains(t, err, "status 409")
	require.EqualValues(t, 1, calls.Load(), "the duplicate called the upstream")
}
