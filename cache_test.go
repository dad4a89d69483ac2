package idemguard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/sanitize"
)

// cachedAnswer is a replayable Result whose data holds a text of n bytes,
// as the guard caches it: the body and the envelope decoded beside it.
func cachedAnswer(t *testing.T, i, n int) Result {
	text := strings.Repeat("x", n)
	env := sanitize.Envelope{OK: true, StopReason: sanitize.Completed, Data: map[string]any{"text": text}}
	body, err := sanitize.Marshal(env)
	require.NoError(t, err)
	return Result{Status: StatusSucceeded, Envelope: env, Body: body, StatusCode: 200, Cached: true, KeyHash: fmt.Sprintf("%064d", i)}
}

// copyOf is res with a body and data of its own (as each stored answer
// has), cheaper than encoding each.
func copyOf(res Result, i int) Result {
	res.Body = bytes.Clone(res.Body)
	res.Envelope.Data = map[string]any{"text": strings.Clone(res.Envelope.Data["text"].(string))}
	res.KeyHash = fmt.Sprintf("%064d", i)
	return res
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// 10 000 cached answers of 60 KB stay under the byte bound, in the cache's
// count and in the heap. The cache bounded by count alone held all of
// them: 1.2 GB here (body and decoded envelope), where it now holds 64 MiB.
func TestReplayCacheBoundedByBytes(t *testing.T) {
	c := newReplayCache(DefaultReplayCacheSize, DefaultReplayCacheBytes, DefaultReplayCacheBytes/2)
	until := time.Now().Add(time.Hour)
	answer := cachedAnswer(t, 0, 60_000)
	before := heapInUse()
	for i := range 10_000 {
		c.put(fmt.Sprintf("t%d", i%4), "chat", fmt.Sprintf("%064d", i), "fp", copyOf(answer, i), until)
	}
	grown := int64(heapInUse()) - int64(before)
	require.LessOrEqual(t, c.bytes, int64(DefaultReplayCacheBytes))
	require.Greater(t, c.order.Len(), 400, "the cache keeps what fits")
	require.Less(t, grown, int64(DefaultReplayCacheBytes)*5/4, "the heap grew by %d MiB for a bound of %d MiB",
		grown>>20, DefaultReplayCacheBytes>>20)
	runtime.KeepAlive(c)
	t.Logf("%d entries, %d MiB counted, heap grew %d MiB", c.order.Len(), c.bytes>>20, grown>>20)
}

// One tenant's answers evict its own entries past its share, never all of
// the others'. Before, one tenant's flood evicted every other entry.
func TestReplayCacheTenantShare(t *testing.T) {
	t.Parallel()
	const size = 10_000
	c := newReplayCache(100, 1<<20, 512<<10)
	until := time.Now().Add(time.Hour)
	for i := range 10 {
		c.put("quiet", "chat", fmt.Sprintf("%064d", i), "fp", cachedAnswer(t, i, size), until)
	}
	for i := range 1000 {
		c.put("loud", "chat", fmt.Sprintf("%064d", i), "fp", cachedAnswer(t, i, size), until)
	}
	for i := range 10 {
		_, _, _, ok := c.get("quiet", "chat", fmt.Sprintf("%064d", i), time.Now())
		require.True(t, ok, "quiet's entry %d was evicted by loud's", i)
	}
	require.LessOrEqual(t, c.tenants["loud"].bytes, int64(512<<10))
	require.LessOrEqual(t, c.bytes, int64(1<<20))
	_, _, _, ok := c.get("loud", "chat", fmt.Sprintf("%064d", 999), time.Now())
	require.True(t, ok, "loud's latest answer is cached")

	// The accounting is exact: removing every entry leaves nothing.
	for k, el := range c.items {
		_ = k
		c.remove(el)
	}
	require.Zero(t, c.bytes)
	require.Empty(t, c.tenants)
}

// A fresh envelope's replay body is its first caller's bytes with only the
// envelope's own "cached" made true: exactly what encoding the envelope
// with cached true gives, even where a string or a data member also spells
// ,"cached":false, and it stays so when the caller changes the Envelope's
// data afterwards.
func TestReplayOfAFreshEnvelopeIsItsBodyWithCachedTrue(t *testing.T) {
	for _, env := range []sanitize.Envelope{
		{OK: true, StopReason: sanitize.Completed},
		{OK: true, StopReason: sanitize.Completed, TraceID: `t,"cached":false`, CreatedActionRequestIDs: []int64{4, 2}},
		{OK: false, StopReason: sanitize.InvalidInput, NeedsHuman: true,
			Data: map[string]any{"cached": false, "a": `,"cached":false`, "n": json.Number("7"), "l": []any{"x", true}}},
	} {
		fresh := Result{Status: StatusSucceeded, Envelope: env}
		var err error
		fresh.Body, err = sanitize.Marshal(env)
		require.NoError(t, err)
		first := bytes.Clone(fresh.Body)
		want := env
		want.Cached = true
		wantBody, err := sanitize.Marshal(want)
		require.NoError(t, err)

		replay := replayOf(fresh, false)
		if fresh.Envelope.Data != nil {
			fresh.Envelope.Data["late"] = "changed by the caller after the call"
		}
		require.Equal(t, string(wantBody), string(replay.Body))
		require.True(t, replay.Cached && replay.Envelope.Cached)
		require.Equal(t, string(first), string(fresh.Body), "the first caller's body changed")
	}
}
