package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/tenancy"
)

// The http suite's harness, on the real MariaDB: the floor handler and the
// storm counter. (The suite itself runs the built serve binary; `make bench`
// exercises that end to end.)

type harness struct {
	h     *httpBench
	floor *proc
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	db := testdb.New(t)
	up := newFakeUpstream()
	t.Cleanup(up.close)
	key := "harness-key-0123456789"
	auth, err := auth.NewAuthenticator(map[tenancy.ID][]string{httpTenant: {auth.HashAPIKey(key)}})
	require.NoError(t, err)
	f := &floor{db: db.DB, upstream: up.url() + "/chat/completions", client: &http.Client{Transport: loopbackTransport()}}
	srv := httptest.NewServer(f.handler(auth))
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: loopbackTransport(), Timeout: 30 * time.Second}
	t.Cleanup(client.CloseIdleConnections)
	fp := &proc{name: "floor", url: srv.URL}
	e := &env{log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		opts: options{duration: 300 * time.Millisecond, rounds: 2, concurrency: []int{4}}}
	return &harness{h: &httpBench{e: e, upstream: up, floor: fp, client: client, apiKey: key}, floor: fp}
}

func TestStormOnTheFloorCountsOneExecution(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	r, err := hs.h.storm(context.Background(), "storm", 16, []*proc{hs.floor})
	require.NoError(t, err)
	require.Equal(t, stormRequests, r.Ops)
	require.Contains(t, r.Note, "executions 1;")
	require.Regexp(t, `statuses (\d+×200)( \d+×409)?;`, r.Note)
}

// A handler that calls the upstream on every request (no guard at all)
// must fail the storm: the counter sees every execution.
func TestStormFailsOnASecondExecution(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	unguarded := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Post(hs.h.upstream.url()+"/chat/completions", "application/json", r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(unguarded.Close)
	_, err := hs.h.storm(context.Background(), "storm", 4, []*proc{{name: "unguarded", url: unguarded.URL}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "executions of one key, want 1")
}

// A tiny interleaved round of the floor's fresh and replay cases.
func TestFloorCasesRunARound(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	ctx := context.Background()
	// One replay key, written through the floor's fresh path.
	require.NoError(t, hs.h.expect(ctx, hs.floor.url+"/v1/ops/"+httpScope, "replay-0", "replay 0", false))
	fresh := benchCase{name: "floor-fresh", op: func(ctx context.Context) error {
		return hs.h.expect(ctx, hs.floor.url+"/v1/ops/"+httpScope, "fresh-"+randomHex(8), "fresh", false)
	}}
	replay := benchCase{name: "floor-replay", baseline: "floor-fresh", op: func(ctx context.Context) error {
		return hs.h.expect(ctx, hs.floor.url+"/floor/replay/"+httpScope, "replay-0", "replay 0", true)
	}}
	rows, err := hs.h.e.compare(ctx, "http", 4, fresh, replay)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	for _, r := range rows {
		require.Positive(t, r.Ops, r.Case)
	}
	require.Positive(t, rows[1].Paired)
}

func TestLoopbackTransportRefusesOtherHosts(t *testing.T) {
	t.Parallel()
	c := &http.Client{Transport: loopbackTransport()}
	_, err := c.Get("http://192.0.2.1:80/")
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "127.0.0.1 only"), err.Error())
}

func TestHTTPCasesFlag(t *testing.T) {
	t.Parallel()
	f, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "fresh,replay,storm", f.opts.httpCases)
	f, err = parseFlags([]string{"-http-cases", "replay"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "replay", f.opts.httpCases)
	_, err = parseFlags([]string{"-http-cases", "replay,nope"}, io.Discard)
	require.ErrorContains(t, err, `"nope" is not one of`)
}

// The floor the suite adds beside floor-fresh and floor-replay: the bare
// net/http floor answers its fixed body.
func TestBareFloorAnswers(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	srv := httptest.NewServer(bare(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	resp, err := hs.h.client.Get(srv.URL + bareFloorPath)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, bareBody, body)
}
