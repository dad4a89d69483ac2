package config

import (
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// OpAnthropicMessages is Anthropic's Messages API as an operation.
const OpAnthropicMessages Operation = "anthropic_messages"

// The anthropic_messages operation's defaults and environment.
const (
	DefaultAnthropicBaseURL = "https://api.anthropic.com/v1"
	DefaultAnthropicTimeout = 60 * time.Second
	EnvAnthropicAPIKey      = "IDEMGUARD_ANTHROPIC_API_KEY"
	EnvAnthropicAPIKeyStd   = "ANTHROPIC_API_KEY"
	EnvAnthropicBaseURL     = "IDEMGUARD_ANTHROPIC_BASE_URL"
	EnvAnthropicModel       = "IDEMGUARD_ANTHROPIC_MODEL"
)

// Anthropic configures the anthropic_messages operation.
type Anthropic struct {
	// BaseURL is the API root; the operation POSTs {BaseURL}/messages.
	BaseURL string
	// Model is sent with every request; it is never stored.
	Model string
	// APIKey is sent as x-api-key; from IDEMGUARD_ANTHROPIC_API_KEY or
	// ANTHROPIC_API_KEY only.
	APIKey string
	// Timeout bounds one call when its scope sets none. Defaults to 60s.
	Timeout time.Duration
	// MaxTokens caps the max_tokens a request may ask for (0: no cap).
	MaxTokens int
}

type rawAnthropic struct {
	BaseURL   string    `yaml:"base_url"`
	Model     string    `yaml:"model"`
	APIKey    yaml.Node `yaml:"api_key"`
	Timeout   string    `yaml:"timeout"`
	MaxTokens int       `yaml:"max_tokens"`
}

// anthropicFromRaw reads the anthropic settings, the environment over the
// file, the key from the environment only.
func (c *Config) anthropicFromRaw(raw *rawAnthropic, env func(string) string, p *problems) {
	if raw.APIKey.Kind != 0 {
		p.add("anthropic.api_key", "is never read from the config file; remove it and set %s (or %s)", EnvAnthropicAPIKey, EnvAnthropicAPIKeyStd)
	}
	c.Anthropic = Anthropic{
		BaseURL:   strings.TrimRight(cmpOr(env(EnvAnthropicBaseURL), cmpOr(raw.BaseURL, DefaultAnthropicBaseURL)), "/"),
		Model:     cmpOr(env(EnvAnthropicModel), raw.Model),
		APIKey:    cmpOr(env(EnvAnthropicAPIKey), env(EnvAnthropicAPIKeyStd)),
		Timeout:   p.duration("anthropic.timeout", raw.Timeout, DefaultAnthropicTimeout),
		MaxTokens: raw.MaxTokens,
	}
}

// validateAnthropic checks the settings the anthropic_messages scopes use.
func (c *Config) validateAnthropic(used bool, p *problems) {
	c.validateProvider(p, used, "anthropic", "anthropic_messages", c.Anthropic.BaseURL, c.Anthropic.Model,
		EnvAnthropicBaseURL, EnvAnthropicModel, c.Anthropic.Timeout, c.Anthropic.MaxTokens)

}
