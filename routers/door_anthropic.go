package routers

import (
	"cmp"
	"net/http"
	"strconv"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/jsonvalue"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
)

// Anthropic's wire: the answers of WireAnthropic.

// anthropicIDPrefix begins the id of every message the door answers; the
// rest is chatCompletionID's (stable for the key).
const anthropicIDPrefix = "msg_ig"

// anthropicMessageOf renders res, a stored chat answer, as the Anthropic
// message of model: one text block, the stop reason, the usage. Every
// answer of a key is the same bytes.
func anthropicMessageOf(res idemguard.Result, model string) []byte {
	data := res.Envelope.Data
	text, _ := data["text"].(string)
	reason, _ := data["finish_reason"].(string)
	b := make([]byte, 0, 256+len(text)+len(model))
	b = append(b, `{"id":"`+anthropicIDPrefix...)
	b = append(b, res.KeyHash[max(0, len(res.KeyHash)-24):]...)
	b = append(b, `","type":"message","role":"assistant","model":`...)
	b = jsonvalue.AppendString(b, model)
	b = append(b, `,"content":[{"type":"text","text":`...)
	b = jsonvalue.AppendString(b, text)
	b = append(b, `}],"stop_reason":`...)
	b = jsonvalue.AppendString(b, cmp.Or(reason, "end_turn"))
	b = append(b, `,"stop_sequence":null,"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, tokenCount(data["prompt_tokens"]), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, tokenCount(data["completion_tokens"]), 10)
	return append(b, "}}"...)
}

// anthropicErrorBody is Anthropic's error object.
type anthropicErrorBody struct {
	Type  string               `json:"type"`
	Error anthropicErrorDetail `json:"error"`
}

type anthropicErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// anthropicError renders p as Anthropic's error object, with p's status:
// the SDKs pick their error class by the status.
func anthropicError(p pipeline.Problem) (string, []byte) {
	msg := cmp.Or(p.Detail, p.Title)
	if len(p.Errors) > 0 && p.Errors[0].Pointer != "" && p.Detail == "" {
		msg = p.Errors[0].Pointer + " " + p.Errors[0].Detail
	}
	return pipeline.ContentJSON, pipeline.EncodeJSON(anthropicErrorBody{Type: "error",
		Error: anthropicErrorDetail{Type: anthropicErrorType(p.Status), Message: msg}})
}

// anthropicErrorType is Anthropic's error type for a status.
func anthropicErrorType(status int) string {
	return doorErrorType(status, "api_error", map[int]string{
		http.StatusRequestEntityTooLarge: "request_too_large",
		http.StatusServiceUnavailable:    "overloaded_error",
	})
}
