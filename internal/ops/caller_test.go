package ops_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/caller"
	"github.com/idemguard/idemguard/internal/ops"
	"github.com/idemguard/idemguard/tenancy"
)

// pseudonym stands for Guard.HashActor; alice's audit actor is already a pseudonym of her subject.
func pseudonym(s string) string { return "h:" + map[string]string{"jwt:h:a11ce": "0123abcd"}[s] }

func asAlice() context.Context {
	return idemguard.WithActor(tenancy.WithTenant(context.Background(), "acme"), "jwt:h:a11ce")
}

// An http_json upstream is told the tenant and the pseudonymous actor,
// never the subject, and a configured header cannot pose as either. On
// the code before, the upstream got neither header.
func TestHTTPJSONTellsTheUpstreamWhoAsks(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, reply(200, `{"answer":"42"}`))
	op := ops.HTTPJSON(ops.HTTPJSONConfig{URL: u.srv.URL, Client: u.srv.Client(),
		Headers: map[string]string{"X-Api-Token": "tok", "idemguard-tenant": "spoofed"}, Pseudonym: pseudonym})
	_, err := op(asAlice(), json.RawMessage(`{"n":1}`))
	require.NoError(t, err)
	h := *u.lastHdr.Load()
	require.Equal(t, []string{"acme"}, h.Values(caller.HeaderTenant))
	require.Equal(t, []string{"h:0123abcd"}, h.Values(caller.HeaderActor))
	require.Equal(t, "tok", h.Get("X-Api-Token"))
	for name, values := range h {
		for _, v := range values {
			require.NotContains(t, v, "a11ce", name)
		}
	}

	// Without a caller (a library's own context): no such header.
	_, err = op(context.Background(), json.RawMessage(`{"n":2}`))
	require.NoError(t, err)
	h = *u.lastHdr.Load()
	require.Empty(t, h.Get(caller.HeaderActor))
	require.Equal(t, "spoofed", h.Get(caller.HeaderTenant), "the operator's own header, when nobody asked")
}

// openai.actor_field puts the actor into safety_identifier or user; by
// default neither is sent.
func TestOpenAIChatActorField(t *testing.T) {
	t.Parallel()
	for field, want := range map[string]string{"": "", ops.ActorSafetyIdentifier: "safety_identifier", ops.ActorUser: "user"} {
		u := newUpstream(t, reply(200, completion))
		_, err := chat(u, func(c *ops.OpenAIConfig) { c.ActorField, c.Pseudonym = field, pseudonym })(asAlice(), chatInputs)
		require.NoError(t, err)
		req := *u.lastReq.Load()
		for _, f := range []string{"safety_identifier", "user"} {
			if f == want {
				require.Equal(t, "h:0123abcd", req[f], "field %s", field)
			} else {
				require.NotContains(t, req, f, "field %s", field)
			}
		}
		require.Empty(t, u.lastHdr.Load().Get(caller.HeaderTenant), "a provider is not told the tenant")
	}
}
