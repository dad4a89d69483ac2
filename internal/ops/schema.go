package ops

import "encoding/json"

// ChatInputSchema is the JSON Schema of ChatInput, the inputs of an
// openai_chat (and demo) scope, as the MCP door describes its tool. The
// operation's own checks (ValidateChatInput) decide; the schema tells an
// agent what to send.
var ChatInputSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"messages":{"type":"array","minItems":1,"maxItems":256,"items":{"type":"object","properties":{` +
	`"role":{"type":"string","enum":["system","developer","user","assistant"]},"content":{"type":"string"}},` +
	`"required":["role","content"],"additionalProperties":false}},` +
	`"max_tokens":{"type":"integer","minimum":1},"temperature":{"type":"number"},"top_p":{"type":"number"},` +
	`"seed":{"type":"integer"},"stop":{"type":"array","items":{"type":"string"}}},` +
	`"required":["messages"],"additionalProperties":false}`)
