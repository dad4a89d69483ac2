package ops

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/caller"
	"github.com/idemguard/idemguard/sanitize"
)

// OpenAIConfig configures OpenAIChat: the operation POSTs
// {BaseURL}/chat/completions (BaseURL e.g. https://api.openai.com/v1), the
// API key as `Authorization: Bearer`, and Provider.MaxTokens also when the
// request asks for none.
type OpenAIConfig struct {
	Provider
	// ActorField, when set, is the request field that carries the caller's
	// pseudonymous actor (caller.Actor, made with Pseudonym), for the
	// provider's abuse monitoring: ActorSafetyIdentifier or ActorUser.
	// Empty: none is sent.
	ActorField string
	// Pseudonym makes the actor (Guard.HashActor); nil: none is sent.
	Pseudonym caller.Pseudonym
}

// Provider is what the operation of an LLM provider's API is configured
// with.
type Provider struct {
	// BaseURL is the API root the operation POSTs below.
	BaseURL string
	// Model is sent with every request. It is never stored or returned.
	Model string
	// APIKey, when set, is sent in the provider's header. Never logged.
	APIKey string
	// Timeout bounds one call (0: only the guard's timeout applies).
	Timeout time.Duration
	// MaxTokens caps the max_tokens a request may ask for (0: no cap).
	MaxTokens int
	// Client sends the requests. Defaults to one client, shared by every
	// operation, on a NewTransport and without a timeout of its own
	// (Timeout and the guard bound each call).
	Client *http.Client
}

// The request fields OpenAIConfig.ActorField may name.
const (
	ActorSafetyIdentifier = "safety_identifier"
	ActorUser             = "user"
)

// ChatMessage is one message of a chat request.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatInput is the request body (the operation's inputs) of an openai_chat
// scope. Only these fields are accepted; the model is the configured one.
type ChatInput struct {
	Messages    []ChatMessage `json:"messages"`
	MaxTokens   *int          `json:"max_tokens,omitempty"`
	Temperature *json.Number  `json:"temperature,omitempty"`
	TopP        *json.Number  `json:"top_p,omitempty"`
	Seed        *int64        `json:"seed,omitempty"`
	Stop        []string      `json:"stop,omitempty"`
}

// MaxChatMessages is the most messages one request may carry.
const MaxChatMessages = 256

var chatRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true}

// chatRequest is what is sent upstream.
type chatRequest struct {
	Model string `json:"model"`
	ChatInput
	SafetyIdentifier string `json:"safety_identifier,omitempty"`
	User             string `json:"user,omitempty"`
}

// newChatRequest is the upstream request for in: the configured model, and
// the caller's pseudonymous actor in the configured field (never the
// caller's own words: the inputs have no such field).
func newChatRequest(ctx context.Context, cfg OpenAIConfig, in ChatInput) chatRequest {
	r := chatRequest{Model: cfg.Model, ChatInput: in}
	switch cfg.ActorField {
	case ActorSafetyIdentifier:
		r.SafetyIdentifier = caller.Actor(ctx, cfg.Pseudonym)
	case ActorUser:
		r.User = caller.Actor(ctx, cfg.Pseudonym)
	}
	return r
}

type chatResponse struct {
	Choices []chatChoice `json:"choices"`
	Usage   chunkUsage   `json:"usage"`
}

// chatChoice is one choice of an answer. A null content (a choice of tool
// calls) is read as the empty text, which is what the answer says of it.
type chatChoice struct {
	Message struct {
		Content string `json:"content"`
	} `json:"message"`
	FinishReason string `json:"finish_reason"`
}

// OpenAIChat returns the operation of an openai_chat scope: it POSTs
// {model, messages, ...} built from the inputs (see ChatInput) to
// {BaseURL}/chat/completions and answers
//
//	{"ok":true,"stopReason":"completed","data":{"text":…,"finish_reason":…,
//	 "prompt_tokens":…,"completion_tokens":…,"total_tokens":…}}
//
// and nothing else: never the model, the provider, the prompt or the
// provider's request id. Failures are *idemguard.OpError: upstream 429
// rate_limited; 5xx, 401/403, a transport error or an unusable answer
// provider_error; 408 or no answer within Timeout timeout; other 4xx
// invalid_input; inputs that do not fit ChatInput invalid_input wrapping the
// *idemguard.InputError that ValidateChatInput returns for them before the
// claim. Errors never contain the prompt, the upstream's body or the API
// key.
func OpenAIChat(cfg OpenAIConfig) Func {
	client := cmp.Or(cfg.Client, defaultClient())
	url := strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions"
	headers := openAIHeaders(cfg)
	return func(ctx context.Context, inputs json.RawMessage) (any, error) {
		in, err := chatInput(inputs, cfg.MaxTokens)
		if err != nil {
			return nil, inputError(err)
		}
		body, err := encodeChatRequest(newChatRequest(ctx, cfg, in))
		if err != nil {
			return nil, invalidInput("openai_chat: encoding the request: %v", err)
		}
		b, _, err := postJSON(ctx, client, "openai_chat upstream", url, cfg.Timeout, headers, body)
		if err != nil {
			return nil, err
		}
		var out chatResponse
		if err := decodeChatResponse(b, &out); err != nil || len(out.Choices) == 0 {
			return nil, &idemguard.OpError{Reason: sanitize.ProviderError,
				Err: fmt.Errorf("openai_chat upstream: answer is not a chat completion with at least one choice")}
		}
		text := out.Choices[0].Message.Content
		// An Envelope, which sanitize converts directly (no JSON round
		// trip) before sanitizing it like any other result; the usage goes
		// with it, so every replay reports the tokens it did not spend.
		return newChatAnswer(sanitize.Envelope{OK: true, StopReason: sanitize.Completed, Data: map[string]any{
			"text":              text,
			"finish_reason":     finishReasonValue(out.Choices[0].FinishReason),
			"prompt_tokens":     json.Number(strconv.FormatInt(out.Usage.PromptTokens, 10)),
			"completion_tokens": json.Number(strconv.FormatInt(out.Usage.CompletionTokens, 10)),
			"total_tokens":      json.Number(strconv.FormatInt(out.Usage.TotalTokens, 10)),
		}}, idemguard.Usage{PromptTokens: out.Usage.PromptTokens, CompletionTokens: out.Usage.CompletionTokens}), nil
	}
}

// openAIHeaders are the headers of every call (fixedHeaders).
func openAIHeaders(cfg OpenAIConfig) http.Header {
	headers := map[string]string{}
	if cfg.APIKey != "" {
		headers["Authorization"] = "Bearer " + cfg.APIKey
	}
	return fixedHeaders(headers)
}

// chatAnswer is a chat operation's answer and its envelope in one
// allocation: returned as an any, a Response and the Envelope in its Value
// would each be moved to the heap on their own.
type chatAnswer struct {
	res idemguard.Response
	env sanitize.Envelope
}

// newChatAnswer is the *idemguard.Response of env with usage (the guard
// takes a *Response and a *Envelope as it takes their values).
func newChatAnswer(env sanitize.Envelope, usage idemguard.Usage) *idemguard.Response {
	a := &chatAnswer{env: env}
	a.res = idemguard.Response{Value: &a.env, Usage: usage}
	return &a.res
}

// checkChatInput checks what decoding cannot: the number of messages, their
// roles and max_tokens; it sets max_tokens to the cap when none is asked.
// Its error is an *idemguard.InputError naming every such field.
func checkChatInput(in *ChatInput, maxTokens int) error {
	var fields []idemguard.FieldError
	if len(in.Messages) == 0 || len(in.Messages) > MaxChatMessages {
		fields = append(fields, idemguard.FieldError{Pointer: "/messages",
			Detail: fmt.Sprintf("must hold 1 to %d messages, got %d", MaxChatMessages, len(in.Messages))})
	}
	for i, m := range in.Messages {
		if !chatRoles[m.Role] {
			fields = append(fields, idemguard.FieldError{Pointer: fmt.Sprintf("/messages/%d/role", i),
				Detail: "must be one of " + chatRoleList})
		}
	}
	if in.MaxTokens != nil {
		switch {
		case *in.MaxTokens < 1:
			fields = append(fields, idemguard.FieldError{Pointer: "/max_tokens", Detail: "must be positive"})
		case maxTokens > 0 && *in.MaxTokens > maxTokens:
			fields = append(fields, idemguard.FieldError{Pointer: "/max_tokens",
				Detail: fmt.Sprintf("must be at most %d (the configured cap)", maxTokens)})
		}
	} else if maxTokens > 0 {
		mt := maxTokens // a copy: the parameter's address would move it to the heap on every call
		in.MaxTokens = &mt
	}
	if len(fields) > 0 {
		return &idemguard.InputError{Fields: fields}
	}
	return nil
}

// describeJSONError keeps a decoding error's shape without quoting input
// text: unknown field names and types are fine, values are not.
func describeJSONError(err error) string {
	switch e := err.(type) {
	case *json.SyntaxError:
		return fmt.Sprintf("invalid JSON at byte %d", e.Offset)
	case *json.UnmarshalTypeError:
		return fmt.Sprintf("field %q must be %s, got JSON %s", e.Field, e.Type, e.Value)
	}
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		return "unknown field " + strings.TrimPrefix(msg, "json: unknown field ")
	}
	return "not a JSON object of the expected shape"
}
