package storetest

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/idemguardtest"
	"github.com/idemguard/idemguard/internal/testkeys"
	"github.com/idemguard/idemguard/sanitize"
)

// A document kept with Call.Keep is replayed byte for byte as the first
// caller got it, however the store normalizes JSON (a MySQL JSON column
// reorders keys and rewrites numbers), with its headers and status.
func guardKeptDocumentIsReplayedByteForByte(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h, withoutCache())
	keep, err := sanitize.NewAllowlist([]string{"id", "name", "tags", "price", "owner.name"})
	require.NoError(t, err)
	var c counter
	doc := json.RawMessage(`{"name":"widget","id":"w-1","price":1.50,"big":1e400,"tags":["b","a"],"owner":{"name":"ann","email":"canary@x"},"stack":"canary-stack"}`)
	op := c.op(idemguard.Response{StatusCode: http.StatusCreated, Value: doc,
		Header: http.Header{"Location": {"/widgets/w-1"}, "X-Request-Id": {"r-1"}}}, nil)
	cl := call("doc", 1)
	cl.Keep = keep
	first, err := g.Do(ctxFor(t), cl, op)
	require.NoError(t, err)
	require.Equal(t, `{"id":"w-1","name":"widget","owner":{"name":"ann"},"price":1.50,"tags":["b","a"]}`, string(first.Body))
	require.Equal(t, http.StatusCreated, first.StatusCode)
	require.ElementsMatch(t, []string{"big", "owner.email", "stack"}, first.DroppedFields)
	for range 2 {
		again, err := g.Do(ctxFor(t), cl, op)
		require.NoError(t, err)
		require.True(t, again.Cached)
		require.Equal(t, string(first.Body), string(again.Body), "byte for byte")
		require.Equal(t, http.StatusCreated, again.StatusCode)
		require.Equal(t, first.Header, again.Header)
		require.ElementsMatch(t, first.DroppedFields, again.DroppedFields)
	}
	require.Equal(t, 1, c.n())
	require.NotContains(t, h.Dump(t), "canary")
	info, err := g.Lookup(ctxFor(t), testkeys.Hash(t, g, "acme", "doc", first.KeyHash))
	require.NoError(t, err)
	require.Nil(t, info.Envelope)
	require.Equal(t, string(first.Body), string(info.Document))
	require.Equal(t, "/widgets/w-1", info.Header.Get("Location"))
}

// An envelope answer with a status of 400 or more says no: it is stored
// and replayed with ok false, never as a success that reads ok:true.
func guardErrorStatusIsNeverStoredAsOK(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h, withoutCache())
	var c counter
	op := c.op(idemguard.Response{StatusCode: http.StatusBadRequest, Value: map[string]any{"error": "item is required"}}, nil)
	first, err := g.Do(ctxFor(t), call("no", 1), op)
	require.NoError(t, err)
	again, err := g.Do(ctxFor(t), call("no", 1), op)
	require.NoError(t, err)
	for _, res := range []idemguard.Result{first, again} {
		require.Equal(t, http.StatusBadRequest, res.StatusCode)
		require.False(t, res.Envelope.OK)
		require.Equal(t, sanitize.InvalidInput, res.StopReason)
		require.NotContains(t, string(res.Body), `"ok":true`)
		require.NotContains(t, string(res.Body), "item is required")
	}
	require.Equal(t, 1, c.n())
}

// Headers an operation returns with an envelope are stored and replayed.
func guardEnvelopeHeadersAreReplayed(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h, withoutCache())
	var c counter
	op := c.op(idemguard.Response{StatusCode: http.StatusAccepted, Value: map[string]any{"ok": true},
		Header: http.Header{"Location": {"/jobs/7"}}}, nil)
	first, err := g.Do(ctxFor(t), call("hdr", 1), op)
	require.NoError(t, err)
	again, err := g.Do(ctxFor(t), call("hdr", 1), op)
	require.NoError(t, err)
	require.True(t, again.Cached)
	require.Equal(t, "/jobs/7", first.Header.Get("Location"))
	require.Equal(t, first.Header, again.Header)
	require.Equal(t, http.StatusAccepted, again.StatusCode)
	sameExceptCached(t, first.Body, again.Body)
}

// Call.Check runs once, before the call's claim write: a failing check
// writes nothing and runs nothing (the key is not burnt), and a replay
// answered by the read before the claim never pays for the check.
func guardCheckRunsOnlyBeforeAClaim(t *testing.T, h *Harness) {
	g, _ := newGuard(t, h, withoutCache(), func(c *idemguard.Config) { idemguardtest.SetReadFirst(c, idemguardtest.ReadFirstAlways) })
	var c counter
	checks := 0
	refused := errors.New("inputs refused")
	cl := call("check", 1)
	cl.ClientKey = "k-check"
	cl.Check = func() error { checks++; return refused }
	_, err := g.Do(ctxFor(t), cl, c.op(okValue, nil))
	require.ErrorIs(t, err, refused)
	require.Equal(t, 0, c.n())
	require.Empty(t, h.rowsIn(t, "acme", "check"), "a refused call writes no row")

	cl.Check = func() error { checks++; return nil }
	first, err := g.Do(ctxFor(t), cl, c.op(okValue, nil))
	require.NoError(t, err)
	require.False(t, first.Cached)
	require.Equal(t, 1, first.Attempt, "the refused call burnt no attempt")
	require.Equal(t, 2, checks)
	for range 3 {
		again, err := g.Do(ctxFor(t), cl, c.op(okValue, nil))
		require.NoError(t, err)
		require.True(t, again.Cached)
	}
	require.Equal(t, 2, checks, "replays never run the check")
	require.Equal(t, 1, c.n())
}
