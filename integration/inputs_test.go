package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Inputs that fail openai_chat's schema: a 400 naming the field, before any
// claim: no row in MariaDB, no upstream call, and the key stays free for
// the corrected request. Only the upstream's own 4xx is a final 422, logged
// with its status code and never its body.
func TestBadInputsBeforeTheClaim(t *testing.T) {
	t.Parallel()
	db, llm, c := database(t), newFakeLLM(t), newClient(t)
	s := startService(t, productionEnv(db.DSN), chatConfig(llm, "  - {name: chat, operation: openai_chat, key_required: true}\n", ""))

	for _, tc := range []struct {
		name, key, body string
		pointers        []string
	}{
		{"a prompt instead of messages", "in-1", `{"prompt":"` + prompt + `"}`, []string{"/prompt", "/messages"}},
		{"role robot", "in-2", `{"messages":[{"role":"robot","content":"` + prompt + `"}]}`, []string{"/messages/0/role"}},
		{"a model field", "in-3", `{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}`, []string{"/model"}},
		{"messages of the wrong type", "in-4", `{"messages":"` + prompt + `"}`, []string{"/messages"}},
		{"max_tokens of the wrong type", "in-5", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":"64"}`, []string{"/max_tokens"}},
	} {
		a := post(t, c, s, "chat", acmeKey, tc.key, tc.body)
		p := requireProblem(t, a, http.StatusBadRequest, "invalid_input")
		require.Equal(t, "urn:idemguard:problem:invalid-input", p.Type, tc.name)
		var got struct {
			Detail string `json:"detail"`
			Errors []struct {
				Pointer string `json:"pointer"`
				Detail  string `json:"detail"`
			} `json:"errors"`
		}
		require.NoError(t, json.Unmarshal(a.body, &got))
		var pointers []string
		for _, e := range got.Errors {
			pointers = append(pointers, e.Pointer)
			require.NotEmpty(t, e.Detail)
		}
		require.Equal(t, tc.pointers, pointers, "%s: %s", tc.name, a)
		require.Contains(t, got.Detail, tc.pointers[0], tc.name)
		require.NotContains(t, string(a.body), prompt, "%s: the answer quotes the input", tc.name)
	}
	require.Zero(t, countRows(t, db), "a rejected input created a row")
	require.Zero(t, llm.calls.Load(), "a rejected input reached the upstream")

	// The key was not burnt: the corrected body with the same key runs.
	requireEnvelope(t, post(t, c, s, "chat", acmeKey, "in-2", chatBody))
	require.Equal(t, 1, countRows(t, db))
	require.EqualValues(t, 1, llm.calls.Load())

	// The upstream's own rejection is final: 422, stored failed, and the
	// log has its status code, not its body (which echoes the prompt).
	llm.set(failWith(http.StatusBadRequest))
	requireProblem(t, post(t, c, s, "chat", acmeKey, "up-1", chatBody), http.StatusUnprocessableEntity, "invalid_input")
	requireProblem(t, post(t, c, s, "chat", acmeKey, "up-1", chatBody), http.StatusUnprocessableEntity, "invalid_input")
	require.EqualValues(t, 2, llm.calls.Load(), "the rejected inputs were sent again")
	require.Equal(t, 2, countRows(t, db))
	var status []int
	eventually(t, 10*time.Second, "the failed attempt logged", func() bool {
		status = status[:0]
		for _, line := range strings.Split(s.logs.String(), "\n") {
			var l struct {
				Msg            string `json:"msg"`
				UpstreamStatus int    `json:"upstream_status"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "guard: operation failed" {
				status = append(status, l.UpstreamStatus)
			}
		}
		return len(status) > 0
	})
	require.Equal(t, []int{http.StatusBadRequest}, status)
	require.NotContains(t, s.logs.String(), prompt, "the upstream's body was logged")
}
