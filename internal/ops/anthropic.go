package ops

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/sanitize"
)

// AnthropicConfig configures AnthropicMessages: the operation POSTs
// {BaseURL}/messages (BaseURL e.g. https://api.anthropic.com/v1), the API
// key as x-api-key.
type AnthropicConfig struct {
	Provider
}

// AnthropicVersion is the anthropic-version header every request sends.
const AnthropicVersion = "2023-06-01"

// AnthropicInput is the request body (the operation's inputs) of an
// anthropic_messages scope: Anthropic's Messages body without model and
// stream. A message's content is a string or a list of text blocks.
type AnthropicInput struct {
	Messages      []AnthropicMessage `json:"messages"`
	MaxTokens     int                `json:"max_tokens"`
	System        string             `json:"system,omitempty"`
	Temperature   *json.Number       `json:"temperature,omitempty"`
	TopP          *json.Number       `json:"top_p,omitempty"`
	TopK          *int               `json:"top_k,omitempty"`
	StopSequences []string           `json:"stop_sequences,omitempty"`
}

// AnthropicMessage is one message: its content a string or text blocks.
type AnthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicBlock is a text content block, the only kind accepted.
type anthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// anthropicInput decodes and checks inputs; its error is an
// *idemguard.InputError naming the fields.
func anthropicInput(inputs json.RawMessage, maxTokens int) (AnthropicInput, error) {
	var in AnthropicInput
	if err := decodeStrict(inputs, &in); err != nil {
		return in, &idemguard.InputError{Fields: []idemguard.FieldError{{Detail: describeJSONError(err)}}}
	}
	var fields []idemguard.FieldError
	if len(in.Messages) == 0 || len(in.Messages) > MaxChatMessages {
		fields = append(fields, idemguard.FieldError{Pointer: "/messages",
			Detail: fmt.Sprintf("must hold 1 to %d messages, got %d", MaxChatMessages, len(in.Messages))})
	}
	for i, m := range in.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			fields = append(fields, idemguard.FieldError{Pointer: fmt.Sprintf("/messages/%d/role", i), Detail: "must be user or assistant"})
		}
		if !textContent(m.Content) {
			fields = append(fields, idemguard.FieldError{Pointer: fmt.Sprintf("/messages/%d/content", i),
				Detail: `must be a string or a list of {"type":"text","text":…} blocks`})
		}
	}
	switch {
	case in.MaxTokens < 1:
		fields = append(fields, idemguard.FieldError{Pointer: "/max_tokens", Detail: "must be a positive integer"})
	case maxTokens > 0 && in.MaxTokens > maxTokens:
		fields = append(fields, idemguard.FieldError{Pointer: "/max_tokens", Detail: fmt.Sprintf("must be at most %d (the configured cap)", maxTokens)})
	}
	if len(fields) > 0 {
		return in, &idemguard.InputError{Fields: fields}
	}
	return in, nil
}

// textContent: c is a string or a non-empty list of text blocks.
func textContent(c json.RawMessage) bool {
	var s string
	if json.Unmarshal(c, &s) == nil {
		return true
	}
	var blocks []anthropicBlock
	dec := json.NewDecoder(bytes.NewReader(c))
	dec.DisallowUnknownFields()
	if dec.Decode(&blocks) != nil || len(blocks) == 0 {
		return false
	}
	for _, b := range blocks {
		if b.Type != "text" {
			return false
		}
	}
	return true
}

// ValidateAnthropicInput checks an anthropic_messages body before the claim.
func ValidateAnthropicInput(maxTokens int) func(json.RawMessage) error {
	return func(inputs json.RawMessage) error {
		_, err := anthropicInput(inputs, maxTokens)
		return err
	}
}

// anthropicRequest is what is sent upstream.
type anthropicRequest struct {
	Model string `json:"model"`
	AnthropicInput
	Stream bool `json:"stream,omitempty"`
}

// anthropicResponse holds the only members of an answer that are read.
type anthropicResponse struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StopReason string         `json:"stop_reason"`
	Usage      anthropicUsage `json:"usage"`
}

type anthropicUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// anthropicCall is the request of one call: the URL and the body built
// from the inputs.
func anthropicCall(cfg AnthropicConfig, inputs json.RawMessage, stream bool) (string, []byte, error) {
	in, err := anthropicInput(inputs, cfg.MaxTokens)
	if err != nil {
		return "", nil, &idemguard.OpError{Reason: sanitize.InvalidInput, Err: err}
	}
	body, err := json.Marshal(anthropicRequest{Model: cfg.Model, AnthropicInput: in, Stream: stream})
	if err != nil {
		return "", nil, invalidInput("anthropic_messages: encoding the request: %v", err)
	}
	return strings.TrimRight(cfg.BaseURL, "/") + "/messages", body, nil
}

// anthropicHeaders are the headers of every call (fixedHeaders).
func anthropicHeaders(cfg AnthropicConfig) http.Header {
	headers := map[string]string{"anthropic-version": AnthropicVersion}
	if cfg.APIKey != "" {
		headers["x-api-key"] = cfg.APIKey
	}
	return fixedHeaders(headers)
}

// AnthropicMessages returns the operation of an anthropic_messages scope:
// it POSTs {model, messages, max_tokens, ...} to {BaseURL}/messages and
// answers the same envelope as OpenAIChat ({"text", "finish_reason" (the
// stop_reason), "prompt_tokens", "completion_tokens", "total_tokens"}), and
// nothing else of the provider's answer. Failures are classified as
// OpenAIChat's.
func AnthropicMessages(cfg AnthropicConfig) Func {
	client, headers := cmp.Or(cfg.Client, defaultClient()), anthropicHeaders(cfg)
	return func(ctx context.Context, inputs json.RawMessage) (any, error) {
		url, body, err := anthropicCall(cfg, inputs, false)
		if err != nil {
			return nil, err
		}
		b, _, err := postJSON(ctx, client, "anthropic_messages upstream", url, cfg.Timeout, headers, body)
		if err != nil {
			return nil, err
		}
		var out anthropicResponse
		if err := json.Unmarshal(b, &out); err != nil || out.StopReason == "" {
			return nil, &idemguard.OpError{Reason: sanitize.ProviderError,
				Err: errors.New("anthropic_messages upstream: answer is not a message with a stop_reason")}
		}
		var text strings.Builder
		for _, c := range out.Content {
			if c.Type == "text" {
				text.WriteString(c.Text)
			}
		}
		return idemguard.Response{Value: chatEnvelope(text.String(), boundedReason(out.StopReason), out.Usage.InputTokens, out.Usage.OutputTokens),
			Usage: idemguard.Usage{PromptTokens: out.Usage.InputTokens, CompletionTokens: out.Usage.OutputTokens}}, nil
	}
}

// chatEnvelope is the stored answer of a chat operation.
func chatEnvelope(text, reason string, prompt, completion int64) sanitize.Envelope {
	return sanitize.Envelope{OK: true, StopReason: sanitize.Completed, Data: map[string]any{
		"text":              text,
		"finish_reason":     reason,
		"prompt_tokens":     json.Number(strconv.FormatInt(prompt, 10)),
		"completion_tokens": json.Number(strconv.FormatInt(completion, 10)),
		"total_tokens":      json.Number(strconv.FormatInt(prompt+completion, 10)),
	}}
}

// boundedReason is a stop reason relayed from upstream, or "unknown".
func boundedReason(r string) string {
	if finishReasonPattern.MatchString(r) {
		return r
	}
	return "unknown"
}
