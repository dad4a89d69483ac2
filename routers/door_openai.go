package routers

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/jsonvalue"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

// OpenAI's wire: the answers of WireOpenAI.

// chatCompletionID is the id of a key's chat.completion: stable for the
// key, so that every answer of it is the same bytes. It is the last 24 hex
// digits of the key hash, the part a key reference shows anyway (a
// principal's references mask only the first half).
func chatCompletionID(keyHash string) string {
	return chatIDPrefix + keyHash[max(0, len(keyHash)-24):]
}

// chatIDPrefix begins the id of every chat.completion the door answers.
const chatIDPrefix = "chatcmpl-ig"

// The members of a chat.completion, in this order (chatCompletionOf writes
// them; the types decode it in tests); no system_fingerprint and no
// provider id: they would be the provider's.
type chatCompletionBody struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   chatUsage    `json:"usage"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type chatMessage struct {
	Role    string  `json:"role"`
	Content string  `json:"content"`
	Refusal *string `json:"refusal"`
}

type chatUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// chatCompletionOf renders res, a stored chat answer ({"text",
// "finish_reason", "*_tokens"}: the openai_chat operation's allowlisted
// data), as the chat.completion of model: created is the completion time
// the store wrote, so a replay is the same bytes as the first answer. It
// appends what pipeline.EncodeJSON(chatCompletionBody{…}) would encode
// (TestChatCompletionEncoding), without reflection: it runs on every
// answer, replays from memory included.
func chatCompletionOf(res idemguard.Result, model string) []byte {
	data := res.Envelope.Data
	text, _ := data["text"].(string)
	reason, _ := data["finish_reason"].(string)
	b := make([]byte, 0, 256+len(text)+len(model))
	b = append(b, `{"id":"`+chatIDPrefix...)
	b = append(b, res.KeyHash[max(0, len(res.KeyHash)-24):]...) // hex digits: chatCompletionID
	b = append(b, `","object":"chat.completion","created":`...)
	b = strconv.AppendInt(b, res.CompletedAt.Unix(), 10)
	b = append(b, `,"model":`...)
	b = jsonvalue.AppendString(b, model)
	b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	b = jsonvalue.AppendString(b, text)
	b = append(b, `,"refusal":null},"logprobs":null,"finish_reason":`...)
	b = jsonvalue.AppendString(b, cmp.Or(reason, "stop"))
	b = append(b, `}],"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, tokenCount(data["prompt_tokens"]), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, tokenCount(data["completion_tokens"]), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, tokenCount(data["total_tokens"]), 10)
	return append(b, "}}"...)
}

// tokenCount is a stored token count (a JSON number), 0 for anything else.
func tokenCount(v any) int64 {
	switch n := v.(type) {
	case json.Number:
		i, _ := strconv.ParseInt(string(n), 10, 64)
		return i
	case float64:
		return int64(n)
	}
	return 0
}

// openAIErrorBody is OpenAI's error object.
type openAIErrorBody struct {
	Error openAIErrorDetail `json:"error"`
}

type openAIErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// openAIError renders p as OpenAI's error object, with p's status: the
// SDKs pick their error class by the status. The code is the problem
// type's slug in snake case; param names the first field of an invalid
// input (or the model of an unknown model).
func openAIError(p pipeline.Problem) (string, []byte) {
	slug := strings.TrimPrefix(p.Type, pipeline.ProblemTypePrefix)
	e := openAIErrorDetail{Message: cmp.Or(p.Detail, p.Title), Type: openAIErrorType(p.Status), Code: strings.ReplaceAll(slug, "-", "_")}
	switch {
	case len(p.Errors) > 0 && p.Errors[0].Pointer != "":
		param := pointerParam(p.Errors[0].Pointer)
		e.Param = &param
	case slug == pipeline.SlugUnknownModel:
		param := "model"
		e.Param = &param
	}
	return pipeline.ContentJSON, pipeline.EncodeJSON(openAIErrorBody{Error: e})
}

// openAIErrorType is OpenAI's error type for a status.
func openAIErrorType(status int) string { return doorErrorType(status, "server_error", nil) }

// doorErrorType is the error type both providers name a status by: own
// first (a provider's names for particular statuses), then the names they
// share, server for any other 5xx, and invalid_request_error for the rest.
func doorErrorType(status int, server string, own map[int]string) string {
	if t, ok := own[status]; ok {
		return t
	}
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return server
	}
	return "invalid_request_error"
}

// pointerParam is a JSON pointer (/messages/0/role) as OpenAI names a
// parameter (messages[0].role).
func pointerParam(ptr string) string {
	var b strings.Builder
	for i, seg := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		if _, err := strconv.Atoi(seg); err == nil && i > 0 {
			b.WriteString("[" + seg + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	return b.String()
}
