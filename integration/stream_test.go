package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/testdb"
)

// Streamed calls (`"stream": true`) through the built binary, against a fake
// upstream that streams chat.completion.chunk events.

const (
	streamCanary = "CANARY-7f3e9"
	streamBody   = `{"messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":64,"stream":true}`
	plainBody    = `{"messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":64}`
)

// streamLLM makes llm stream n chunks (words "w0 ", "w1 ", ...), gap apart
// or each when the test sends on step (when step is not nil). The provider's
// id, model and system_fingerprint carry a canary. cut > 0 ends the
// connection after that many chunks without [DONE]. progress counts the
// chunks written.
type streamLLM struct {
	n, cut   int
	gap      time.Duration
	step     chan struct{}
	progress atomic.Int32
}

// eventStream starts a text/event-stream answer on w and returns a write
// that sends one piece of it and flushes it to the client at once.
func eventStream(w http.ResponseWriter) func(format string, args ...any) {
	w.Header().Set("Content-Type", "text/event-stream")
	rc := http.NewResponseController(w)
	return func(format string, args ...any) {
		fmt.Fprintf(w, format, args...)
		_ = rc.Flush()
	}
}

func (s *streamLLM) behave(n int32, w http.ResponseWriter, r *http.Request) {
	write := eventStream(w)
	for i := range s.n {
		if s.cut > 0 && i == s.cut {
			return // the stream ends without a finish reason or [DONE]
		}
		if s.step != nil {
			select {
			case <-s.step:
			case <-r.Context().Done():
				return
			}
		} else if i > 0 {
			time.Sleep(s.gap)
		}
		role := ""
		if i == 0 {
			role = `"role":"assistant",`
		}
		write("data: {\"id\":\"chatcmpl-%s-%d\",\"object\":\"chat.completion.chunk\",\"model\":%q,\"system_fingerprint\":\"fp_%s\",\"choices\":[{\"index\":0,\"delta\":{%s\"content\":\"w%d \"},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
			streamCanary, n, model, streamCanary, role, i)
		s.progress.Add(1)
	}
	write("data: {\"id\":\"chatcmpl-%s\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"system_fingerprint\":\"fp_%s\"}\n\n", streamCanary, streamCanary)
	write("data: {\"id\":\"chatcmpl-%s\",\"choices\":[],\"usage\":{\"prompt_tokens\":21,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", streamCanary, s.n, 21+s.n)
	write("data: [DONE]\n\n")
}

func (s *streamLLM) text() string {
	var b strings.Builder
	for i := range s.n {
		fmt.Fprintf(&b, "w%d ", i)
	}
	return b.String()
}

// sse is one streamed answer as the client read it.
type sse struct {
	status int
	header http.Header
	raw    string
	events []streamEvent
}

type streamEvent struct{ id, typ, data string }

// content joins the content deltas of the answer's chunks.
func (a sse) content(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, e := range a.events {
		if e.typ != "" || e.data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(e.data), &c), "event %q", e.data)
		for _, ch := range c.Choices {
			b.WriteString(ch.Delta.Content)
		}
	}
	return b.String()
}

func (a sse) done() bool {
	return len(a.events) > 0 && a.events[len(a.events)-1] == streamEvent{data: "[DONE]"}
}

// streamReader reads server-sent events one at a time.
type streamReader struct {
	resp *http.Response
	br   *bufio.Reader
	raw  strings.Builder
}

func openStream(ctx context.Context, c *http.Client, s *service, key, body string, headers ...[2]string) (*streamReader, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url("/v1/ops/chat"), strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+acmeKey)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for _, h := range headers {
		req.Header.Add(h[0], h[1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	return &streamReader{resp: resp, br: bufio.NewReader(resp.Body)}, nil
}

// next reads one event; io.EOF at the end of the answer.
func (r *streamReader) next() (streamEvent, error) {
	var e streamEvent
	var data []string
	for {
		line, err := r.br.ReadString('\n')
		r.raw.WriteString(line)
		if err != nil {
			return e, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if data == nil && e.typ == "" && e.id == "" {
				continue
			}
			e.data = strings.Join(data, "\n")
			return e, nil
		case strings.HasPrefix(line, "id: "):
			e.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			e.typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
}

// readAll reads the rest of the answer.
func (r *streamReader) readAll(t *testing.T, first ...streamEvent) sse {
	t.Helper()
	defer r.resp.Body.Close()
	a := sse{status: r.resp.StatusCode, header: r.resp.Header, events: first}
	if r.resp.Header.Get("Content-Type") != "text/event-stream" {
		b, err := io.ReadAll(r.br)
		require.NoError(t, err)
		a.raw = r.raw.String() + string(b)
		return a
	}
	for {
		e, err := r.next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		a.events = append(a.events, e)
	}
	a.raw = r.raw.String()
	return a
}

func stream(t *testing.T, c *http.Client, s *service, key, body string, headers ...[2]string) sse {
	t.Helper()
	r, err := openStream(context.Background(), c, s, key, body, headers...)
	require.NoError(t, err)
	return r.readAll(t)
}

func streamService(t *testing.T, db *testdb.Database, llm *fakeLLM) *service {
	return startService(t, productionEnv(db.DSN), chatConfig(llm, "  - {name: chat, operation: openai_chat}\n", ""))
}

func dumpRows(t *testing.T, db *testdb.Database) string {
	t.Helper()
	var lines []string
	require.NoError(t, db.DB.Select(&lines, `SELECT CONCAT_WS(' ', tenant, scope, key_hash, status, attempt_count,
  COALESCE(response_json, 'NULL'), COALESCE(response_events, 'NULL')) FROM idempotency_keys ORDER BY id`))
	return strings.Join(lines, "\n")
}

// The first event reaches the client while the upstream is still streaming
// (judged by the upstream's own progress, not a clock); replays send the
// same bytes as the first answer, a plain request gets the same content,
// and the provider's id, system_fingerprint and the prompt reach no row,
// log or answer. Relaying from a buffer filled by the whole upstream answer
// (no flush per event) fails the ordering check.
func TestStreamReachesTheCallerLiveAndReplaysTheSameBytes(t *testing.T) {
	t.Parallel()
	db := database(t)
	llm := newFakeLLM(t)
	up := &streamLLM{n: 20, gap: 100 * time.Millisecond}
	llm.set(up.behave)
	s := streamService(t, db, llm)
	c := newClient(t)

	r, err := openStream(context.Background(), c, s, "s-live", streamBody)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.resp.StatusCode)
	require.Equal(t, "text/event-stream", r.resp.Header.Get("Content-Type"))
	first, err := r.next()
	require.NoError(t, err)
	require.Less(t, up.progress.Load(), int32(up.n), "the first event must arrive before the upstream has sent its last chunk")
	live := r.readAll(t, first)
	require.True(t, live.done(), "a stream ends with [DONE]: %s", live.raw)
	require.Equal(t, up.text(), live.content(t))
	require.Empty(t, live.header.Get("Idempotent-Replayed"))

	var replays []sse
	for range 2 {
		rep := stream(t, c, s, "s-live", streamBody)
		require.Equal(t, http.StatusOK, rep.status)
		require.Equal(t, "true", rep.header.Get("Idempotent-Replayed"))
		require.NotEmpty(t, rep.header.Get("Idempotent-Completed-At"))
		replays = append(replays, rep)
	}
	require.Equal(t, replays[0].raw, replays[1].raw, "replays are byte-identical")
	require.Equal(t, live.raw, replays[0].raw, "a replay is what the first caller got")
	require.EqualValues(t, 1, llm.calls.Load())

	plain := post(t, c, s, "chat", acmeKey, "s-live", plainBody)
	env := requireEnvelope(t, plain)
	require.True(t, env.Cached)
	require.Equal(t, up.text(), env.Data["text"], "a plain request for a streamed key gets the same content")

	// A key completed by a plain request streams as a short sequence.
	llm.set(func(n int32, w http.ResponseWriter, r *http.Request) { complete(w, n) })
	first2 := post(t, c, s, "chat", acmeKey, "p-first", plainBody)
	requireEnvelope(t, first2)
	short := stream(t, c, s, "p-first", streamBody)
	require.Equal(t, http.StatusOK, short.status)
	require.True(t, short.done())
	require.Equal(t, "Heron launches in May.", short.content(t))
	require.Equal(t, short.raw, stream(t, c, s, "p-first", streamBody).raw)
	require.EqualValues(t, 2, llm.calls.Load())

	rows := dumpRows(t, db)
	require.Contains(t, rows, `data: {"object":"chat.completion.chunk"`, "the event sequence is stored")
	for _, secretText := range []string{streamCanary, prompt, model} {
		require.NotContains(t, rows, secretText)
		require.NotContains(t, s.logs.String(), secretText)
		for _, a := range append(replays, live, short) {
			require.NotContains(t, a.raw, secretText)
		}
		require.NotContains(t, string(plain.body), secretText)
	}
}

// A caller that hangs up after three events does not stop the paid call:
// it completes, is stored, and the retry replays every chunk. Without
// Detach on the streamed call the upstream request is cancelled with the
// caller, the row ends failed and the retry calls upstream again.
func TestStreamCallerHangUpStillCompletesAndIsStored(t *testing.T) {
	t.Parallel()
	db := database(t)
	llm := newFakeLLM(t)
	up := &streamLLM{n: 8, step: make(chan struct{})}
	llm.set(up.behave)
	s := streamService(t, db, llm)
	c := newClient(t)

	ctx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	go func() { up.step <- struct{}{} }() // the answer's headers go with its first event
	r, err := openStream(ctx, c, s, "s-hangup", streamBody)
	require.NoError(t, err)
	for i := range 3 {
		if i > 0 {
			up.step <- struct{}{}
		}
		_, err := r.next()
		require.NoError(t, err)
	}
	hangUp()
	_ = r.resp.Body.Close()
	for range up.n - 3 {
		select {
		case up.step <- struct{}{}:
		case <-time.After(20 * time.Second):
			t.Fatalf("the upstream stopped after %d chunks when the caller hung up", up.progress.Load())
		}
	}
	eventually(t, 20*time.Second, "the hung-up stream is stored", func() bool {
		_, rec := lookup(t, c, s, "chat", acmeKey, "s-hangup")
		return rec.Status == "succeeded"
	})
	retry := stream(t, c, s, "s-hangup", streamBody)
	require.Equal(t, http.StatusOK, retry.status)
	require.Equal(t, "true", retry.header.Get("Idempotent-Replayed"))
	require.True(t, retry.done())
	require.Equal(t, up.text(), retry.content(t), "the retry replays all chunks")
	require.EqualValues(t, 1, llm.calls.Load())
}

// An upstream that cuts its stream after three chunks: the client gets an
// error event, nothing is stored as a success, and the retry calls the
// upstream again. Accepting a stream that ends without [DONE] fails it.
func TestStreamUpstreamFailureIsRetryable(t *testing.T) {
	t.Parallel()
	db := database(t)
	llm := newFakeLLM(t)
	cut := &streamLLM{n: 6, cut: 3}
	llm.set(cut.behave)
	s := streamService(t, db, llm)
	c := newClient(t)

	failed := stream(t, c, s, "s-cut", streamBody)
	require.Equal(t, http.StatusOK, failed.status, "the stream had begun: %s", failed.raw)
	require.False(t, failed.done())
	last := failed.events[len(failed.events)-1]
	require.Equal(t, "error", last.typ)
	var p problem
	require.NoError(t, json.Unmarshal([]byte(last.data), &p))
	require.Equal(t, "provider_error", p.StopReason)
	require.Equal(t, "w0 w1 w2 ", failed.content(t))
	_, rec := lookup(t, c, s, "chat", acmeKey, "s-cut")
	require.Equal(t, "failed", rec.Status)
	require.NotContains(t, dumpRows(t, db), "w0", "a failed stream stores no events")

	whole := &streamLLM{n: 6}
	llm.set(whole.behave)
	retry := stream(t, c, s, "s-cut", streamBody)
	require.Equal(t, http.StatusOK, retry.status)
	require.True(t, retry.done())
	require.Empty(t, retry.header.Get("Idempotent-Replayed"))
	require.Equal(t, whole.text(), retry.content(t))
	require.EqualValues(t, 2, llm.calls.Load(), "the retry called the upstream again")
}

// 300 concurrent streaming requests for one key over three processes, a
// third of them with Prefer: wait: the upstream runs once, and every 200 is
// the same stream byte for byte (attached live in the owner's process,
// replayed elsewhere). Without the claim (each request running its own
// upstream call) the call count fails it.
func TestStreamThreeHundredRequestsOverThreeProcessesRunOnce(t *testing.T) {
	t.Parallel()
	db := database(t)
	llm := newFakeLLM(t)
	up := &streamLLM{n: 20, gap: 50 * time.Millisecond}
	llm.set(up.behave)
	services := []*service{streamService(t, db, llm), streamService(t, db, llm), streamService(t, db, llm)}
	c := newClient(t)

	const total = 300
	var wg sync.WaitGroup
	var mu sync.Mutex
	bodies := map[string]int{}
	statuses := map[int]int{}
	waited200, waiters, followed := 0, 0, 0
	for i := range total {
		wait := (i/3)%3 == 0
		if wait {
			waiters++
		}
		wg.Go(func() {
			var headers [][2]string
			if wait {
				headers = append(headers, [2]string{"Prefer", "wait=30"})
			}
			a := stream(t, c, services[i%3], "s-storm", streamBody, headers...)
			mu.Lock()
			defer mu.Unlock()
			statuses[a.status]++
			if a.status == http.StatusOK {
				bodies[a.raw]++
				if wait {
					waited200++
				}
				if a.header.Get("Idempotent-Replayed") == "true" && a.header.Get("Idempotent-Completed-At") == "" {
					followed++ // followed the running stream in the owner's process (a stored replay has a completion time)
				}
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 1, llm.calls.Load(), "exactly one upstream execution; statuses %v", statuses)
	require.Len(t, bodies, 1, "every 200 carries the identical stream; statuses %v", statuses)
	for raw := range bodies {
		require.Contains(t, raw, "data: [DONE]")
		require.Contains(t, raw, `"content":"w19 "`)
	}
	require.Equal(t, waiters, waited200, "every waiter gets the stream; statuses %v", statuses)
	require.Positive(t, followed, "waiters in the owner's process follow the live stream")
	for status := range statuses {
		require.Contains(t, []int{http.StatusOK, http.StatusConflict}, status, "statuses %v", statuses)
	}
}
