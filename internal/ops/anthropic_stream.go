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
	"strconv"
	"strings"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/sanitize"
)

// The events of a streamed anthropic_messages answer are Anthropic's
// (message_start, content_block_start, content_block_delta,
// content_block_stop, message_delta, message_stop), built by idemguard
// from the upstream's text deltas, stop reason and token counts only: the
// provider's message id and model never reach them. The message id is a
// constant and the model empty, so that every stream of a key is the same
// bytes.

// anthropicEvent holds the only members of an upstream event that are read.
type anthropicEvent struct {
	Type    string `json:"type"`
	Message struct {
		Usage anthropicUsage `json:"usage"`
	} `json:"message"`
	Index int `json:"index"`
	Delta struct {
		Type       string `json:"type"`
		Text       string `json:"text"`
		StopReason string `json:"stop_reason"`
	} `json:"delta"`
	Usage anthropicUsage `json:"usage"`
}

// anthropicChunk is one event idemguard sends: its type and data.
func anthropicChunk(typ string, data []byte) idemguard.Chunk {
	return idemguard.Chunk{Type: typ, Data: data}
}

func messageStart(inputTokens int64) idemguard.Chunk {
	return anthropicChunk("message_start", []byte(`{"type":"message_start","message":{"id":"msg_idemguard","type":"message","role":"assistant","content":[],"model":"","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`+
		strconv.FormatInt(inputTokens, 10)+`,"output_tokens":0}}}`))
}

var (
	blockStart = anthropicChunk("content_block_start", []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
	blockStop  = anthropicChunk("content_block_stop", []byte(`{"type":"content_block_stop","index":0}`))
	msgStop    = anthropicChunk("message_stop", []byte(`{"type":"message_stop"}`))
)

func textDelta(text string) idemguard.Chunk {
	d, _ := json.Marshal(text) // a string always encodes
	return anthropicChunk("content_block_delta", append(append([]byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":`), d...), "}}"...))
}

func messageDelta(reason string, outputTokens int64) idemguard.Chunk {
	r, _ := json.Marshal(reason)
	return anthropicChunk("message_delta", []byte(`{"type":"message_delta","delta":{"stop_reason":`+string(r)+
		`,"stop_sequence":null},"usage":{"output_tokens":`+strconv.FormatInt(outputTokens, 10)+`}}`))
}

// AnthropicReplay renders an answer stored without events as the events
// a stream of it would have had.
func AnthropicReplay(env sanitize.Envelope) []idemguard.Chunk {
	text, _ := env.Data["text"].(string)
	reason, _ := env.Data["finish_reason"].(string)
	return []idemguard.Chunk{messageStart(intOf(env.Data["prompt_tokens"])), blockStart, textDelta(text), blockStop,
		messageDelta(cmp.Or(reason, "end_turn"), intOf(env.Data["completion_tokens"])), msgStop}
}

// AnthropicMessagesStream returns the streamed form of AnthropicMessages:
// the same request with "stream": true, the events built as above, and
// the same envelope returned. A stream that ends before message_stop, an
// error event or a malformed event is a provider_error.
func AnthropicMessagesStream(cfg AnthropicConfig) StreamFunc {
	client, headers := cmp.Or(cfg.Client, defaultClient()), anthropicHeaders(cfg)
	return func(ctx context.Context, inputs json.RawMessage, emit func(idemguard.Chunk)) (any, error) {
		url, body, err := anthropicCall(cfg, inputs, true)
		if err != nil {
			return nil, err
		}
		resp, callCtx, cancel, err := openStream(ctx, client, "anthropic_messages upstream", url, cfg.Timeout, headers, body)
		if err != nil {
			return nil, err
		}
		defer cancel()
		defer resp.Body.Close()
		a := anthropicAssembler{emit: emit}
		if err := a.read(resp.Body); err != nil {
			if ctx.Err() != nil || callCtx.Err() != nil {
				return nil, transportError(ctx, callCtx, "anthropic_messages upstream", err)
			}
			return nil, &idemguard.OpError{Reason: sanitize.ProviderError, Err: fmt.Errorf("anthropic_messages upstream: %w", err)}
		}
		drain(resp.Body)
		return idemguard.Response{Value: chatEnvelope(a.text.String(), a.reason, a.input, a.output),
			Usage: idemguard.Usage{PromptTokens: a.input, CompletionTokens: a.output}}, nil
	}
}

// anthropicAssembler reads an upstream event stream, emits the events
// built from it and assembles the answer.
type anthropicAssembler struct {
	emit          func(idemguard.Chunk)
	text          strings.Builder
	reason        string
	input, output int64
	started, done bool
}

func (a *anthropicAssembler) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4<<10), MaxStreamLineBytes)
	for sc.Scan() && !a.done {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue // event names (the data says its type), comments, blank lines
		}
		var ev anthropicEvent
		if err := json.Unmarshal(bytes.TrimSpace(data), &ev); err != nil {
			return errors.New("an event is not JSON")
		}
		if err := a.event(ev); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if !a.done {
		return errors.New("the event stream ended before message_stop")
	}
	return nil
}

func (a *anthropicAssembler) event(ev anthropicEvent) error {
	switch ev.Type {
	case "message_start":
		a.started, a.input = true, ev.Message.Usage.InputTokens
		a.emit(messageStart(a.input))
		a.emit(blockStart)
	case "content_block_delta":
		if ev.Index == 0 && ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
			a.text.WriteString(ev.Delta.Text)
			a.emit(textDelta(ev.Delta.Text))
		}
	case "message_delta":
		a.reason, a.output = boundedReason(ev.Delta.StopReason), ev.Usage.OutputTokens
	case "message_stop":
		if !a.started || a.reason == "" {
			return errors.New("the event stream stopped without message_start or a stop reason")
		}
		a.emit(blockStop)
		a.emit(messageDelta(a.reason, a.output))
		a.emit(msgStop)
		a.done = true
	case "error":
		return errors.New("the upstream sent an error event")
	}
	return nil
}
