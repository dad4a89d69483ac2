package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// killNineLLM streams n chunks whose content carries the call number
// ("call1-w0 ", "call1-w1 ", ...), so that what one upstream call said can
// be told from what another said (streamLLM's content is the same on every
// call; only its id, which idemguard never decodes, has the call number).
// The first call writes each chunk when the test sends on step, and gives
// up when serve's connection goes away; later calls stream at once.
// progress counts the first call's chunks (each before it is written);
// firstEnded is closed when the first call's handler has returned, and
// finished reports whether it got to its finish chunk.
type killNineLLM struct {
	n          int
	step       chan struct{}
	progress   atomic.Int32
	finished   atomic.Bool
	firstEnded chan struct{}
}

func (s *killNineLLM) behave(n int32, w http.ResponseWriter, r *http.Request) {
	if n == 1 {
		defer close(s.firstEnded)
	}
	write := eventStream(w)
	for i := range s.n {
		if n == 1 {
			select {
			case <-s.step:
			case <-r.Context().Done():
				return // serve is gone: the stream is cut mid-way
			}
		}
		if n == 1 {
			s.progress.Add(1) // before the write: a client that read chunk i sees it counted
		}
		role := ""
		if i == 0 {
			role = `"role":"assistant",`
		}
		write("data: {\"id\":\"chatcmpl-%s-%d\",\"object\":\"chat.completion.chunk\",\"model\":%q,\"system_fingerprint\":\"fp_%s\",\"choices\":[{\"index\":0,\"delta\":{%s\"content\":\"call%d-w%d \"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
			streamCanary, n, model, streamCanary, role, n, i)
	}
	if n == 1 {
		s.finished.Store(true)
	}
	write("data: {\"id\":\"chatcmpl-%s\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"system_fingerprint\":\"fp_%s\"}\n\n", streamCanary, streamCanary)
	write("data: {\"id\":\"chatcmpl-%s\",\"choices\":[],\"usage\":{\"prompt_tokens\":21,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", streamCanary, s.n, 21+s.n)
	write("data: [DONE]\n\n")
}

// text is the whole content of call n.
func (s *killNineLLM) text(n int) string {
	var b strings.Builder
	for i := range s.n {
		fmt.Fprintf(&b, "call%d-w%d ", n, i)
	}
	return b.String()
}

// `kill -9` of the serve process that owns a key while its upstream is in
// the middle of a stream. The process dies holding the claim; once the
// claim is stale (stale_after 1s) a request to a fresh process, waiting
// with Prefer: wait, takes the key over and streams a whole answer from a
// second upstream call, live (no replay headers). The row ends succeeded
// with two attempts; a third request replays the second call's events byte
// for byte; the events of the cut-off first call are in no stored answer,
// replay or envelope. A second process that answered 409 or an error
// instead of taking over, a takeover that ran the upstream again more than
// once, or a commit that stored the dead process's partial events fails it.
func TestStreamKillNineMidStreamIsTakenOverAndStoredOnce(t *testing.T) {
	t.Parallel()
	db := database(t)
	llm := newFakeLLM(t)
	const key = "s-kill9"
	const seen = 3 // chunks A's client reads before the kill
	up := &killNineLLM{n: 8, step: make(chan struct{}), firstEnded: make(chan struct{})}
	llm.set(up.behave)
	cfg := chatConfig(llm, "  - {name: chat, operation: openai_chat, stale_after: 1s}\n", "")
	env := productionEnv(db.DSN)
	c := newClient(t)

	// Process A starts the stream; its client reads the first chunks.
	a := startService(t, env, cfg)
	opened := make(chan struct{})
	defer close(opened)
	go func() { // the answer's headers go with its first event
		select {
		case up.step <- struct{}{}:
		case <-opened:
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ra, err := openStream(ctx, c, a, key, streamBody)
	require.NoError(t, err)
	defer ra.resp.Body.Close()
	require.Equal(t, http.StatusOK, ra.resp.StatusCode)
	require.Equal(t, "text/event-stream", ra.resp.Header.Get("Content-Type"))
	require.Empty(t, ra.resp.Header.Get("Idempotent-Replayed"), "A runs the key itself")
	var partial []streamEvent
	for i := range seen {
		if i > 0 {
			select {
			case up.step <- struct{}{}:
			case <-time.After(20 * time.Second):
				t.Fatalf("the first upstream call stopped after %d chunks", up.progress.Load())
			}
		}
		e, err := ra.next()
		require.NoError(t, err)
		partial = append(partial, e)
	}
	cut := sse{events: partial}
	require.Equal(t, "call1-w0 call1-w1 call1-w2 ", cut.content(t), "A's client got the first call's chunks")
	require.EqualValues(t, seen, up.progress.Load(), "the upstream waits for the test before its next chunk")

	// SIGKILL while the upstream is mid-stream: A's client loses its stream,
	// and the upstream sees serve's connection go away before its end.
	a.kill()
	var rest []streamEvent
	for {
		e, err := ra.next()
		if err != nil {
			break // the connection died with A
		}
		rest = append(rest, e)
	}
	require.Empty(t, rest, "A sent nothing more after its client read the events the upstream had sent")
	select {
	case <-up.firstEnded:
	case <-time.After(20 * time.Second):
		t.Fatal("the first upstream call did not see serve's connection close")
	}
	require.False(t, up.finished.Load(), "the first upstream call was cut before its end")
	require.EqualValues(t, seen, up.progress.Load())
	require.EqualValues(t, 1, llm.calls.Load())
	var row struct {
		Status   string `db:"status"`
		Attempts int    `db:"attempt_count"`
	}
	require.NoError(t, db.DB.Get(&row, `SELECT status, attempt_count FROM idempotency_keys`))
	require.Equal(t, "started", row.Status, "A died holding the claim")
	require.Equal(t, 1, row.Attempts)

	// Process B, same database: the duplicate waits until A's claim is
	// stale, takes the key over and streams the second call live.
	b := startService(t, env, cfg)
	second := stream(t, c, b, key, streamBody, [2]string{"Prefer", "wait=20"})
	require.Equal(t, http.StatusOK, second.status, "B's answer: %s", second.raw)
	require.Equal(t, "text/event-stream", second.header.Get("Content-Type"), "B's answer: %s", second.raw)
	require.Empty(t, second.header.Get("Idempotent-Replayed"), "B ran the key itself: a live stream, not a replay")
	require.Empty(t, second.header.Get("Idempotent-Completed-At"))
	require.True(t, second.done(), "B's stream ends with [DONE]: %s", second.raw)
	require.Equal(t, up.text(2), second.content(t), "B streams the whole answer of the second upstream call")
	require.NotContains(t, second.raw, "call1-", "B's stream carries nothing of the cut-off call")
	require.EqualValues(t, 2, llm.calls.Load(), "the upstream ran twice for the key: A's cut-off call and B's")
	eventually(t, 10*time.Second, "B logs that it took over A's stale claim", func() bool {
		return strings.Contains(b.logs.String(), "took over a stale claim") // stderr is read asynchronously
	})

	require.NoError(t, db.DB.Get(&row, `SELECT status, attempt_count FROM idempotency_keys`))
	require.Equal(t, "succeeded", row.Status)
	require.Equal(t, 2, row.Attempts, "attempt 1 died with A, attempt 2 is B's")
	require.Equal(t, 1, countRows(t, db))

	// A third request replays B's events byte for byte.
	third := stream(t, c, b, key, streamBody)
	require.Equal(t, http.StatusOK, third.status, "third answer: %s", third.raw)
	require.Equal(t, "true", third.header.Get("Idempotent-Replayed"))
	require.NotEmpty(t, third.header.Get("Idempotent-Completed-At"))
	require.Equal(t, second.raw, third.raw, "the replay is byte for byte what B's caller got")
	require.EqualValues(t, 2, llm.calls.Load(), "the replay did not call the upstream")

	// The cut-off call's events are in no stored answer: not in the row,
	// not in the envelope a plain request gets.
	plain := post(t, c, b, "chat", acmeKey, key, plainBody)
	envl := requireEnvelope(t, plain)
	require.True(t, envl.Cached)
	require.Equal(t, up.text(2), envl.Data["text"])
	rows := dumpRows(t, db)
	require.Contains(t, rows, `"content":"call2-w0 "`, "B's event sequence is stored")
	for _, e := range partial {
		require.NotContains(t, rows, string(e.data), "a partial event of A is stored")
		require.NotContains(t, third.raw, string(e.data), "a partial event of A is replayed")
	}
	for _, text := range []string{"call1-", streamCanary, prompt, model} {
		require.NotContains(t, rows, text)
		require.NotContains(t, third.raw, text)
		require.NotContains(t, string(plain.body), text)
	}
	require.NotContains(t, b.logs.String(), "call1-")
}
