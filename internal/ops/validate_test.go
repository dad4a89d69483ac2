package ops_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/ops"
	"github.com/idemguard/idemguard/sanitize"
)

// chatBadInputs are openai_chat bodies that fail the schema, with the
// pointers of the fields each names, in order.
var chatBadInputs = map[string]struct {
	body     string
	pointers []string
}{
	"prompt instead of messages": {`{"prompt":"` + prompt + `"}`, []string{"/prompt", "/messages"}},
	"no messages":                {`{}`, []string{"/messages"}},
	"null messages":              {`{"messages":null}`, []string{"/messages"}},
	"empty messages":             {`{"messages":[]}`, []string{"/messages"}},
	"messages not an array":      {`{"messages":{"role":"user"}}`, []string{"/messages"}},
	"role robot":                 {`{"messages":[{"role":"user","content":"hi"},{"role":"robot","content":"` + prompt + `"}]}`, []string{"/messages/1/role"}},
	"role missing":               {`{"messages":[{"content":"hi"}]}`, []string{"/messages/0/role"}},
	"role a number":              {`{"messages":[{"role":1,"content":"hi"}]}`, []string{"/messages/0/role"}},
	"message not an object":      {`{"messages":["hi"]}`, []string{"/messages/0"}},
	"message null":               {`{"messages":[null]}`, []string{"/messages/0/role"}},
	"content a number":           {`{"messages":[{"role":"user","content":42}]}`, []string{"/messages/0/content"}},
	"unknown message field":      {`{"messages":[{"role":"user","content":"hi","name":"n"}]}`, []string{"/messages/0/name"}},
	"model":                      {`{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}`, []string{"/model"}},
	"unknown field":              {`{"messages":[{"role":"user","content":"hi"}],"a/b~c":1}`, []string{"/a~1b~0c"}},
	"max_tokens a string":        {`{"messages":[{"role":"user","content":"hi"}],"max_tokens":"10"}`, []string{"/max_tokens"}},
	"max_tokens a fraction":      {`{"messages":[{"role":"user","content":"hi"}],"max_tokens":1.5}`, []string{"/max_tokens"}},
	"max_tokens zero":            {`{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, []string{"/max_tokens"}},
	"max_tokens over the cap":    {`{"messages":[{"role":"user","content":"hi"}],"max_tokens":101}`, []string{"/max_tokens"}},
	"temperature a boolean":      {`{"messages":[{"role":"user","content":"hi"}],"temperature":true}`, []string{"/temperature"}},
	"seed a fraction":            {`{"messages":[{"role":"user","content":"hi"}],"seed":0.5}`, []string{"/seed"}},
	"stop a string":              {`{"messages":[{"role":"user","content":"hi"}],"stop":"END"}`, []string{"/stop"}},
	"stop holds a number":        {`{"messages":[{"role":"user","content":"hi"}],"stop":["a",1]}`, []string{"/stop/1"}},
	"several at once":            {`{"model":"x","messages":[{"role":"robot"},{"role":"user","content":7}],"top_p":"high"}`, []string{"/messages/0/role", "/messages/1/content", "/model", "/top_p"}},
	"not an object":              {`["hi"]`, []string{""}},
	"a string":                   {`"` + prompt + `"`, []string{""}},
}

func pointersOf(t *testing.T, err error) []string {
	t.Helper()
	var ie *idemguard.InputError
	require.ErrorAs(t, err, &ie)
	var out []string
	for _, f := range ie.Fields {
		require.NotEmpty(t, f.Detail, f.Pointer)
		require.NotContains(t, f.Detail, prompt, "a detail quotes the input")
		out = append(out, f.Pointer)
	}
	return out
}

// Each bad body is rejected by the validation with the fields named, and
// by the operation itself with the same fields as a final invalid_input,
// without an upstream call.
func TestValidateChatInput(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, reply(200, completion))
	f := chat(u, func(c *ops.OpenAIConfig) { c.MaxTokens = 100 })
	validate := ops.ValidateChatInput(100)
	for name, tc := range chatBadInputs {
		err := validate(json.RawMessage(tc.body))
		require.Equal(t, tc.pointers, pointersOf(t, err), name)

		_, runErr := f(context.Background(), json.RawMessage(tc.body))
		requireReason(t, runErr, sanitize.InvalidInput)
		require.Equal(t, tc.pointers, pointersOf(t, runErr), name)
	}
	require.Zero(t, u.calls.Load())

	for _, body := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user"}],"max_tokens":100,"temperature":"0.5","top_p":null,"seed":-1,"stop":["\n",null]}`,
		`{"Messages":[{"ROLE":"assistant","content":null}]}`,
	} {
		require.NoError(t, validate(json.RawMessage(body)), body)
		_, err := f(context.Background(), json.RawMessage(body))
		require.NoError(t, err, body)
	}
	require.EqualValues(t, 3, u.calls.Load())
	require.NoError(t, ops.ValidateChatInput(0)(json.RawMessage(`{"messages":[{"role":"user"}],"max_tokens":100000}`)), "no cap")
}

// Whatever the body, the validation rejects exactly what the operation
// rejects, and names a field of every object it rejects.
func TestValidateChatInputAgreesWithTheOperation(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, reply(200, completion))
	f := chat(u, func(c *ops.OpenAIConfig) { c.MaxTokens = 100 })
	validate := ops.ValidateChatInput(100)
	bodies := []string{}
	for _, tc := range chatBadInputs {
		bodies = append(bodies, tc.body)
	}
	bodies = append(bodies, ops.ChatInputSeeds...)
	for _, body := range bodies {
		verr := validate(json.RawMessage(body))
		before := u.calls.Load()
		_, rerr := f(context.Background(), json.RawMessage(body))
		if verr == nil {
			require.NoError(t, rerr, "validated, then rejected: %q", body)
			continue
		}
		requireReason(t, rerr, sanitize.InvalidInput)
		require.Equal(t, before, u.calls.Load(), "rejected and called upstream: %q", body)
		if trimmed := strings.TrimSpace(body); strings.HasPrefix(trimmed, "{") && json.Valid([]byte(trimmed)) {
			for _, p := range pointersOf(t, verr) {
				require.NotEmpty(t, p, "an object rejected without naming a field: %q", body)
			}
		}
	}
}
