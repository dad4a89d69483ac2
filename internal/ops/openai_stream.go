package ops

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/progress"
	"github.com/idemguard/idemguard/sanitize"
)

// StreamFunc runs a streamed operation on the request's JSON inputs (with
// the delivery member "stream" already taken out), emitting each event as it
// has it, and returns the assembled answer like a Func.
type StreamFunc func(ctx context.Context, inputs json.RawMessage, emit func(idemguard.Chunk)) (any, error)

// MaxStreamLineBytes is the longest line of an upstream event stream read;
// a longer one is a provider_error.
const MaxStreamLineBytes = 1 << 20

// streamRequest is what a streamed call sends upstream.
type streamRequest struct {
	chatRequest
	Stream        bool          `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// upstreamChunk holds the only members of an upstream chunk that are read:
// everything else (id, model, system_fingerprint, created, logprobs, ...)
// is never decoded, so it can reach no event, row or log.
type upstreamChunk struct {
	Choices []upstreamChoice `json:"choices"`
	Usage   *chunkUsage      `json:"usage"`
}

type upstreamChoice struct {
	Index int `json:"index"`
	Delta struct {
		Role    *string `json:"role"`
		Content *string `json:"content"`
	} `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

type chunkUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// The events idemguard builds: OpenAI's chat.completion.chunk shape, with
// only the members below, in this order, so one chunk always encodes to the
// same bytes. No id, model, created or system_fingerprint: they would be
// the provider's, or differ between the first caller and a replay.
type chunkEvent struct {
	Object  string        `json:"object"`
	Choices []choiceEvent `json:"choices"`
	Usage   *chunkUsage   `json:"usage,omitempty"`
}

type choiceEvent struct {
	Index        int        `json:"index"`
	Delta        deltaEvent `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
}

type deltaEvent struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// finishReasonPattern bounds a finish reason relayed from upstream (stop,
// length, content_filter, tool_calls, ...); anything else becomes unknown.
var finishReasonPattern = regexp.MustCompile(`^[a-z_]{1,32}$`)

// chunkData is c's JSON (appendChunk), in a buffer sized for it.
func chunkData(c chunkEvent) []byte {
	n := 128
	for _, ch := range c.Choices {
		if ch.Delta.Content != nil {
			n += len(*ch.Delta.Content) + len(*ch.Delta.Content)/8
		}
	}
	return appendChunk(make([]byte, 0, n), c)
}

func contentEvent(role string, content string) idemguard.Chunk {
	return idemguard.Chunk{Data: chunkData(chunkEvent{Object: "chat.completion.chunk",
		Choices: []choiceEvent{{Delta: deltaEvent{Role: role, Content: &content}}}})}
}

func finishEvent(reason string) idemguard.Chunk {
	return idemguard.Chunk{Data: chunkData(chunkEvent{Object: "chat.completion.chunk",
		Choices: []choiceEvent{{FinishReason: &reason}}})}
}

func usageEvent(u chunkUsage) idemguard.Chunk {
	return idemguard.Chunk{Data: chunkData(chunkEvent{Object: "chat.completion.chunk", Usage: &u})}
}

// OpenAIChatStream returns the streamed form of OpenAIChat: it sends the
// same request with "stream": true (and usage included) and emits, for each
// upstream chunk, an event idemguard builds from the chunk's role, content
// delta, finish reason and usage only. It returns the same envelope as
// OpenAIChat, so a plain and a streamed call of one key agree. The upstream
// stream must end with a finish reason and [DONE]; an error, a malformed
// chunk or a stream cut short is a provider_error (timeout past Timeout),
// never a success.
func OpenAIChatStream(cfg OpenAIConfig) StreamFunc {
	client := cmp.Or(cfg.Client, defaultClient())
	url := strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions"
	headers := openAIHeaders(cfg)
	return func(ctx context.Context, inputs json.RawMessage, emit func(idemguard.Chunk)) (any, error) {
		in, err := decodeChatInput(inputs)
		if err != nil {
			return nil, invalidInput("openai_chat: inputs must be {\"messages\":[{\"role\":…,\"content\":…}], …}: %s", describeJSONError(err))
		}
		if err := checkChatInput(&in, cfg.MaxTokens); err != nil {
			return nil, err
		}
		body, err := marshalStreamRequest(&streamRequest{chatRequest: newChatRequest(ctx, cfg, in),
			Stream: true, StreamOptions: streamOptions{IncludeUsage: true}})
		if err != nil {
			return nil, invalidInput("openai_chat: encoding the request: %v", err)
		}
		resp, callCtx, cancel, err := openStream(ctx, client, "openai_chat upstream", url, cfg.Timeout, headers, body)
		if err != nil {
			return nil, err
		}
		defer cancel()
		defer resp.Body.Close()
		a := assembler{emit: emit, ctx: ctx}
		if err := a.read(resp.Body); err != nil {
			if ctx.Err() != nil || callCtx.Err() != nil {
				return nil, transportError(ctx, callCtx, "openai_chat upstream", err)
			}
			return nil, &idemguard.OpError{Reason: sanitize.ProviderError, Err: fmt.Errorf("openai_chat upstream: %w", err)}
		}
		drain(resp.Body)
		return a.envelope(), nil
	}
}

// Bounds of drain.
const (
	drainWait  = 500 * time.Millisecond
	drainBytes = 64 << 10
)

// drain reads what follows [DONE] to the body's end, so that closing the
// body gives its connection back to the pool: closed before its end, a
// body's connection is dropped, and the next stream dials (and handshakes
// TLS) again before its first event. Most servers end the body in a write
// of its own just after [DONE]; one that sends more than drainBytes, or
// does not end it within drainWait, loses the connection as before.
func drain(body io.ReadCloser) {
	stop := time.AfterFunc(drainWait, func() { _ = body.Close() })
	defer stop.Stop()
	_, _ = io.CopyN(io.Discard, body, drainBytes)
}

// OpenAIChatReplay renders an answer stored without events (the key was
// completed by a plain call) as the events a stream of it would have had:
// the whole text, the finish reason, the usage.
func OpenAIChatReplay(env sanitize.Envelope) []idemguard.Chunk {
	text, _ := env.Data["text"].(string)
	reason, _ := env.Data["finish_reason"].(string)
	return []idemguard.Chunk{contentEvent("assistant", text), finishEvent(cmp.Or(reason, "stop")),
		usageEvent(chunkUsage{PromptTokens: intOf(env.Data["prompt_tokens"]),
			CompletionTokens: intOf(env.Data["completion_tokens"]), TotalTokens: intOf(env.Data["total_tokens"])})}
}

func intOf(v any) int64 {
	switch n := v.(type) {
	case json.Number:
		i, _ := n.Int64()
		return i
	case float64:
		return int64(n)
	case int64:
		return n
	case int:
		return int64(n)
	}
	return 0
}

// assembler reads an upstream event stream, emits the events built from
// it and assembles the answer.
type assembler struct {
	emit   func(idemguard.Chunk)
	ctx    context.Context // the operation's: progress goes to its guard
	deltas int64           // content deltas received: about one token each
	text   strings.Builder
	finish string
	usage  chunkUsage
	done   bool
}

var errTruncated = errors.New("the event stream ended before [DONE]")

func (a *assembler) read(r interface{ Read([]byte) (int, error) }) error {
	sc := bufio.NewScanner(r)
	// A small first buffer, grown as a line needs (to MaxStreamLineBytes):
	// a chunk is a few hundred bytes, and a large first buffer was a large
	// allocation (and its zeroing, and the collections it brought on)
	// before every stream's first event.
	sc.Buffer(make([]byte, 0, 4<<10), MaxStreamLineBytes)
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // comments, event names, ids, blank lines
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			a.done = true
			break
		}
		if err := a.chunk(data); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	switch {
	case !a.done:
		return errTruncated
	case a.finish == "":
		return errors.New("the event stream ended without a finish reason")
	}
	return nil
}

func (a *assembler) chunk(data []byte) error {
	var c upstreamChunk
	if err := decodeChunk(data, &c); err != nil {
		return errors.New("a chunk is not a JSON chat.completion.chunk")
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue // one choice is asked for
		}
		role := ""
		if ch.Delta.Role != nil && *ch.Delta.Role == "assistant" {
			role = "assistant"
		}
		if role != "" || (ch.Delta.Content != nil && *ch.Delta.Content != "") {
			content := ""
			if ch.Delta.Content != nil {
				content = *ch.Delta.Content
			}
			a.text.WriteString(content)
			a.emit(contentEvent(role, content))
			if content != "" && a.ctx != nil {
				// The tokens received so far (the total is not known): a
				// number only, never the text.
				a.deltas++
				progress.Report(a.ctx, progress.Update{Done: a.deltas})
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			a.finish = *ch.FinishReason
			if !finishReasonPattern.MatchString(a.finish) {
				a.finish = "unknown"
			}
			a.emit(finishEvent(a.finish))
		}
	}
	if c.Usage != nil {
		a.usage = *c.Usage
		a.emit(usageEvent(a.usage))
	}
	return nil
}

func (a *assembler) envelope() sanitize.Envelope {
	return sanitize.Envelope{OK: true, StopReason: sanitize.Completed, Data: map[string]any{
		"text":              a.text.String(),
		"finish_reason":     a.finish,
		"prompt_tokens":     json.Number(strconv.FormatInt(a.usage.PromptTokens, 10)),
		"completion_tokens": json.Number(strconv.FormatInt(a.usage.CompletionTokens, 10)),
		"total_tokens":      json.Number(strconv.FormatInt(a.usage.TotalTokens, 10)),
	}}
}
