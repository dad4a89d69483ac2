package routers

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

// OpenAI's wire: the answers of WireOpenAI.

// chatCompletionID is the id of a key's chat.completion: stable for the
// key, so that every answer of it is the same bytes. It is the last 24 hex
// digits of the key hash, the part a key reference shows anyway (a
// principal's references mask only the first half).
func chatCompletionID(keyHash string) string {
	return "chatcmpl-ig" + keyHash[max(0, len(keyHash)-24):]
}

// The members of a chat.completion, in this order; no system_fingerprint
// and no provider id: they would be the provider's.
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
// the store wrote, so a replay is the same bytes as the first answer.
func chatCompletionOf(res idemguard.Result, model string) []byte {
	data := res.Envelope.Data
	text, _ := data["text"].(string)
	reason, _ := data["finish_reason"].(string)
	return pipeline.EncodeJSON(chatCompletionBody{
		ID: chatCompletionID(res.KeyHash), Object: "chat.completion", Created: res.CompletedAt.Unix(), Model: model,
		Choices: []chatChoice{{Message: chatMessage{Role: "assistant", Content: text}, FinishReason: cmp.Or(reason, "stop")}},
		Usage: chatUsage{PromptTokens: tokenCount(data["prompt_tokens"]), CompletionTokens: tokenCount(data["completion_tokens"]),
			TotalTokens: tokenCount(data["total_tokens"])},
	})
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
func openAIErrorType(status int) string {
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
		return "server_error"
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
