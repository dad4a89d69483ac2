package ops

import (
	"cmp"
	"fmt"
	"net/http"

	"github.com/idemguard/idemguard/internal/caller"
	"github.com/idemguard/idemguard/internal/config"
)

// FromConfig builds the registry of c's scopes. client sends every upstream
// request (nil: the operations' shared default client, on a NewTransport);
// pseudonym makes the actor upstreams are told of (Guard.HashActor; nil:
// none).
// A scope's timeout defaults to its
// operation's (openai.timeout, upstream.timeout; none for demo); the
// protocol settings it leaves zero take the guard's defaults (c.Defaults).
func FromConfig(c *config.Config, client *http.Client, pseudonym caller.Pseudonym) (*Registry, error) {
	client = cmp.Or(client, defaultClient())
	scopes := make([]*Scope, 0, len(c.Scopes))
	for _, s := range c.Scopes {
		sc := &Scope{Name: s.Name, Settings: s.Settings, KeyRequired: s.KeyRequired, Timeout: s.Timeout, Isolation: s.Isolation,
			Tenants: s.Tenants, Async: s.Async}
		// The guard ORs the defaults' allow_reset in; resolved here so the
		// MCP door offers forceNew wherever a forced run is allowed.
		sc.Settings.AllowReset = sc.Settings.AllowReset || c.Defaults.AllowReset
		switch s.Operation {
		case config.OpOpenAIChat:
			sc.Timeout = cmp.Or(sc.Timeout, c.OpenAI.Timeout)
			oc := OpenAIConfig{Provider: Provider{BaseURL: c.OpenAI.BaseURL, Model: c.OpenAI.Model, APIKey: c.OpenAI.APIKey,
				Timeout: sc.Timeout, MaxTokens: c.OpenAI.MaxTokens, Client: client}, ActorField: c.OpenAI.ActorField, Pseudonym: pseudonym}
			sc.Run, sc.Stream, sc.StreamReplay = OpenAIChat(oc), OpenAIChatStream(oc), OpenAIChatReplay
			sc.Validate, sc.InputSchema = ValidateChatInput(c.OpenAI.MaxTokens), ChatInputSchema
		case config.OpAnthropicMessages:
			sc.Timeout = cmp.Or(sc.Timeout, c.Anthropic.Timeout)
			ac := AnthropicConfig{Provider{BaseURL: c.Anthropic.BaseURL, Model: c.Anthropic.Model, APIKey: c.Anthropic.APIKey,
				Timeout: sc.Timeout, MaxTokens: c.Anthropic.MaxTokens, Client: client}}
			sc.Run, sc.Stream, sc.StreamReplay = AnthropicMessages(ac), AnthropicMessagesStream(ac), AnthropicReplay
			sc.Validate = ValidateAnthropicInput(c.Anthropic.MaxTokens)
		case config.OpHTTPJSON:
			sc.Timeout = cmp.Or(sc.Timeout, c.Upstream.Timeout)
			sc.Run = HTTPJSON(HTTPJSONConfig{URL: cmp.Or(s.URL, c.Upstream.URL), Headers: c.Upstream.Headers,
				Timeout: sc.Timeout, Client: client, Pseudonym: pseudonym})
		case config.OpDemo:
			sc.Run, sc.Stream, sc.StreamReplay = Demo(s.Delay), DemoStream(s.Delay), OpenAIChatReplay
		default:
			return nil, fmt.Errorf("ops: scope %q: unknown operation %q", s.Name, s.Operation)
		}
		scopes = append(scopes, sc)
	}
	return NewRegistry(scopes...)
}
