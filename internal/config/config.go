package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/tenancy"
)

// Environment variables read by Load. The secret (EnvSecret) and the OpenAI
// API key are read only from the environment, never from the file.
const (
	EnvConfig          = "IDEMGUARD_CONFIG"
	EnvMode            = "IDEMGUARD_MODE"
	EnvListen          = "IDEMGUARD_LISTEN"
	EnvMetricsListen   = "IDEMGUARD_METRICS_LISTEN"
	EnvMySQLDSN        = "IDEMGUARD_MYSQL_DSN"
	EnvAPIKeys         = "IDEMGUARD_API_KEYS"
	EnvCORSOrigins     = "IDEMGUARD_CORS_ORIGINS"
	EnvOpenAIBaseURL   = "IDEMGUARD_OPENAI_BASE_URL"
	EnvOpenAIModel     = "IDEMGUARD_OPENAI_MODEL"
	EnvOpenAIAPIKey    = "IDEMGUARD_OPENAI_API_KEY"
	EnvOpenAIAPIKeyStd = "OPENAI_API_KEY"
	EnvUpstreamURL     = "IDEMGUARD_UPSTREAM_URL"
	EnvJWTJWKSURL      = "IDEMGUARD_JWT_JWKS_URL"
	EnvJWTIssuer       = "IDEMGUARD_JWT_ISSUER"
	EnvJWTAudience     = "IDEMGUARD_JWT_AUDIENCE"
	EnvAuditLog        = "IDEMGUARD_AUDIT_LOG"
	EnvAuditTable      = "IDEMGUARD_AUDIT_TABLE"
)

// Values of audit.log besides a file path.
const (
	AuditLogOff    = "off"
	AuditLogStdout = "stdout"
	AuditLogStderr = "stderr"
)

// Mode is the run mode.
type Mode string

const (
	// Development runs without a database (in-memory store) when no DSN is
	// set, generates a secret, and accepts the demo API key DemoAPIKey for
	// tenant DemoTenant on the demo scopes only. It is the default when
	// nothing production-like is configured (no database, API keys, JWT
	// settings or scopes of a real operation); with any of those the mode
	// must be set.
	Development Mode = "development"
	// Production requires a DSN, IDEMPOTENCY_SECRET and at least one tenant
	// API key, and never migrates the database.
	Production Mode = "production"
)

// Development-mode demo identity. The key is public (it is in the README): it
// is accepted only in development mode.
const (
	DemoTenant tenancy.ID = "demo"
	DemoAPIKey            = "dev-demo-key"
	DemoScope             = "demo"
	// DemoJobScope is development mode's long-running demo: a 30-second
	// job, for Prefer: respond-async, its event stream and cancel.
	DemoJobScope  = "demo-job"
	DefaultListen = "127.0.0.1:8080"
	// DefaultMetricsListen is the operator listener's address: /metrics,
	// the operator page and the service-wide figures, never on the API's
	// listener. MetricsListenOff turns it off.
	DefaultMetricsListen = "127.0.0.1:9090"
	MetricsListenOff     = "off"
)

// Defaults of the service settings.
const (
	DefaultMaxBodyBytes          int64 = 1 << 20
	MaxMaxBodyBytes              int64 = 64 << 20
	DefaultMaxWait                     = 30 * time.Second
	MaxMaxWait                         = 5 * time.Minute
	DefaultShutdownGrace               = 20 * time.Second
	DefaultRetryAfter                  = time.Second
	DefaultUnavailableRetryAfter       = 5 * time.Second
	DefaultDemoDelay                   = 3 * time.Second
	DefaultOpenAIBaseURL               = "https://api.openai.com/v1"
	DefaultOpenAITimeout               = 60 * time.Second
	DefaultUpstreamTimeout             = 30 * time.Second
	MaxStoreTimeout                    = time.Minute
	MaxOperationTimeout                = time.Hour
	MaxDemoDelay                       = 10 * time.Minute
	DefaultReplayCacheSize             = idemguard.DefaultReplayCacheSize
	DefaultReplayCacheMaxAge           = idemguard.DefaultReplayCacheMaxAge
)

// The isolations of a scope's keys (Scope.Isolation).
const (
	IsolationAuto      = "auto"
	IsolationTenant    = "tenant"
	IsolationPrincipal = "principal"
)

// isolation parses a scope's isolation; empty (IsolationAuto) stays empty.
func (p *problems) isolation(setting, raw string) string {
	switch v := strings.ToLower(strings.TrimSpace(raw)); v {
	case "", IsolationAuto, IsolationTenant, IsolationPrincipal:
		return v
	}
	p.add(setting, "must be %s (each JWT caller has keys of its own, API-key callers share the tenant's), "+
		"%s (the whole tenant shares the keys) or %s (every caller, also each API key, has keys of its own), got %q",
		IsolationAuto, IsolationTenant, IsolationPrincipal, truncate(raw, 20))
	return ""
}

// Operation names a built-in operation a scope runs.
type Operation string

// The built-in operations.
const (
	OpOpenAIChat Operation = "openai_chat"
	OpHTTPJSON   Operation = "http_json"
	OpDemo       Operation = "demo"
)

// Config is the validated configuration of `idemguard serve`.
type Config struct {
	// Source is the file the settings came from ("" if none).
	Source string
	// Mode is development or production (see Development for the default).
	Mode Mode
	// Listen is the TCP address to serve on. Defaults to 127.0.0.1:8080.
	Listen string
	// MetricsListen is the operator listener's TCP address (/metrics, /ops
	// and the service-wide /v1/stats), apart from the API's, which browsers
	// reach. Defaults to DefaultMetricsListen; MetricsListenOff: none.
	MetricsListen string
	// MySQLDSN is the database; empty means the in-memory store
	// (development mode only).
	MySQLDSN string
	// Secret is the HMAC secret, from IDEMPOTENCY_SECRET only.
	Secret []byte
	// SecretGenerated is true when Secret was generated for this process
	// (development mode without IDEMPOTENCY_SECRET).
	SecretGenerated bool
	// SecretID names Secret in the rows made under it: IDEMPOTENCY_SECRET_ID,
	// else the file's secret_id; "" is the unnamed secret.
	SecretID string
	// PreviousSecrets are the secrets of a rotation still recognised, from
	// IDEMPOTENCY_PREVIOUS_SECRETS only (docs/OPERATIONS.md).
	PreviousSecrets []idemguard.SecretVersion
	// APIKeys maps each tenant to the hex SHA-256 digests of its API keys
	// (lower case), each optionally preceded by the key's name and "="
	// (auth.ParseKeyEntry): the audit trail names the caller "key:<name>". In development mode the caller adds DemoAPIKey for
	// DemoTenant.
	APIKeys map[tenancy.ID][]string
	// CORSOrigins are the browser origins allowed to call the API.
	CORSOrigins []string
	// MaxBodyBytes limits a request body. Defaults to 1 MiB.
	MaxBodyBytes int64
	// MaxWait caps `Prefer: wait=N`. Defaults to 30s.
	MaxWait time.Duration
	// MaxWaiters bounds the requests of one process that wait for one
	// running key (429 over it). Defaults to idemguard.DefaultMaxWaiters.
	MaxWaiters int
	// MaxLiveStreams bounds the streamed answers one process runs at once
	// (503 over it). Defaults to idemguard.DefaultMaxLiveStreams.
	MaxLiveStreams int
	// RetryAfter is the Retry-After of a 409 (in progress). Defaults to 1s.
	RetryAfter time.Duration
	// UnavailableRetryAfter is the Retry-After of a 503 (store down).
	// Defaults to 5s.
	UnavailableRetryAfter time.Duration
	// ShutdownGrace is how long in-flight requests may run after SIGTERM
	// before their operations are cut off. Defaults to 20s.
	ShutdownGrace time.Duration
	// StoreTimeout bounds each store call. Defaults to 5s.
	StoreTimeout time.Duration
	// Pool sizes the MySQL connection pool.
	Pool mysqlconn.PoolConfig
	// ReplayCacheSize and ReplayCacheMaxAge configure the guard's in-memory
	// replay cache (size -1 disables it).
	ReplayCacheSize   int
	ReplayCacheMaxAge time.Duration
	// ReplayCacheBytes bounds the replay cache's memory, and
	// ReplayCacheTenantBytes one tenant's share of it (see
	// idemguard.Config). Defaults 64 MiB and half of it.
	ReplayCacheBytes       int64
	ReplayCacheTenantBytes int64
	// Defaults are the protocol settings of scopes that leave one unset.
	Defaults idemguard.Settings
	// OpenAI configures the openai_chat operation.
	OpenAI OpenAI
	// Anthropic configures the anthropic_messages operation (anthropic.go).
	Anthropic Anthropic
	// Upstream configures the http_json operation.
	Upstream Upstream
	// Scopes are the registered operations, in file order. In development
	// mode the demo scope is added unless a scope of that name exists.
	Scopes []Scope
	// JWT configures bearer JWTs for browsers (scopes with auth: [jwt]).
	JWT JWT
	// Audit configures the audit trail.
	Audit Audit
	// AuthFailures limits failed authentications per client address.
	AuthFailures AuthFailures
	// Limits are the per-tenant limits (limits.go).
	Limits Limits
	// MCP configures the MCP door (mcp.go).
	MCP MCP
	// Doors serve providers' wires (doors.go).
	Doors []Door
	// AllowInsecureUpstreams allows http:// provider URLs (openai.base_url,
	// upstream.url, a scope's url) in production.
	AllowInsecureUpstreams bool
}

// AuthFailures limits failed authentications per client address
// (docs/CONFIGURATION.md): after Max wrong credentials within Window a
// client gets 429 until its window ends.
type AuthFailures struct {
	// Max is the failures allowed per client and window; -1 turns the limit
	// off. Defaults to 20.
	Max int
	// Window is counted from a client's first failure. Defaults to 1m.
	Window time.Duration
	// MaxClients bounds the clients tracked. Defaults to 10000.
	MaxClients int
}

// Defaults and bounds of AuthFailures.
const (
	DefaultAuthFailuresMax        = 20
	DefaultAuthFailuresWindow     = time.Minute
	DefaultAuthFailuresMaxClients = 10_000
	MaxAuthFailuresMaxClients     = 1_000_000
)

// Audit configures the audit trail (docs/OPERATIONS.md).
type Audit struct {
	// Log is where the JSON-lines audit stream goes: AuditLogOff (the
	// default), AuditLogStdout, AuditLogStderr, or a file path (appended
	// to, created 0600).
	Log string
	// Table writes the trail to the idempotency_audit table when the store
	// is MySQL (the record of truth, which GET …/history reads). Defaults
	// to true.
	Table bool
}

// JWT configures the verification of browsers' bearer JWTs (see
// auth.JWTConfig). Empty JWKSURL: JWTs are off.
type JWT struct {
	// JWKSURL is the identity provider's JWK Set (https; http only in
	// development mode).
	JWKSURL string
	// Issuer and Audience must match the token's iss and aud.
	Issuer   string
	Audience string
	// TenantClaim names the claim holding the tenant ID. Defaults to
	// auth.DefaultTenantClaim (tenant_id).
	TenantClaim string
	// Leeway is the clock skew allowed on exp/nbf/iat. Defaults to 30s.
	Leeway time.Duration
	// Algorithms is the allowlist. Defaults to RS256, ES256, EdDSA.
	Algorithms []string
	// Tenants are the tenants the identity provider's tokens may name; a
	// token naming another is refused. Required in production mode; empty
	// in development mode accepts any tenant.
	Tenants []tenancy.ID
}

// Enabled reports whether JWTs are configured.
func (j JWT) Enabled() bool { return j.JWKSURL != "" }

// OpenAI configures the OpenAI-compatible chat-completion operation.
type OpenAI struct {
	// BaseURL is the API root; the operation POSTs {BaseURL}/chat/completions.
	BaseURL string
	// Model is sent with every request; it is never stored.
	Model string
	// APIKey is sent as a bearer token; from IDEMGUARD_OPENAI_API_KEY or
	// OPENAI_API_KEY only.
	APIKey string
	// Timeout bounds one call when its scope sets none. Defaults to 60s.
	Timeout time.Duration
	// MaxTokens caps the max_tokens a request may ask for (0: no cap).
	MaxTokens int
	// ActorField names the request field that carries the caller's
	// pseudonymous actor (safety_identifier or user); empty: none.
	ActorField string
}

// Upstream configures the generic JSON operation.
type Upstream struct {
	// URL receives a POST of the request's inputs.
	URL string
	// Timeout bounds one call when its scope sets none. Defaults to 30s.
	Timeout time.Duration
	// Headers are added to every upstream request (e.g. an authorization).
	Headers map[string]string
}

// Scope is one registered operation.
type Scope struct {
	Name      string
	Operation Operation
	// Settings are the protocol settings; zero fields take Config.Defaults.
	Settings idemguard.Settings
	// KeyRequired makes the Idempotency-Key header mandatory.
	KeyRequired bool
	// Timeout bounds one execution; 0 takes the operation's default
	// (openai.timeout, upstream.timeout; none for demo).
	Timeout time.Duration
	// Delay is the demo operation's simulated latency. Defaults to 3s.
	Delay time.Duration
	// URL overrides upstream.url for an http_json scope.
	URL string
	// Auth lists the credentials the scope accepts: api_key, jwt or both.
	// Defaults to auth.DefaultMethods (api_key).
	Auth []auth.Method
	// Isolation is whose key space the scope's keys live in: IsolationAuto
	// (the default, also when empty: each JWT caller its own, API-key
	// callers the tenant's), IsolationTenant or IsolationPrincipal.
	Isolation string
	// Prices are what the scope's model charges, per million tokens; with
	// them the money a replay saved is counted too (zero: tokens only).
	Prices Prices
	// Limits limit each tenant within the scope, besides its own limits;
	// zero fields add none.
	Limits Limit
	// Tenants, when set, are the only tenants that may use the scope (mcp.go).
	Tenants []tenancy.ID
	// Async makes the scope's MCP tool start it as a job (mcp.go).
	Async bool
}

// Prices are a model's prices per million tokens, in the currency the
// operator reads them in (idemguard names none).
type Prices struct {
	PromptPerMillion     float64 `yaml:"prompt_per_million"`
	CompletionPerMillion float64 `yaml:"completion_per_million"`
}

// Cost is what usage costs at these prices.
func (p Prices) Cost(u idemguard.Usage) float64 {
	return float64(u.PromptTokens)*p.PromptPerMillion/1e6 + float64(u.CompletionTokens)*p.CompletionPerMillion/1e6
}

// raw* mirror the YAML file. Durations are strings so that a bad one is
// reported with the name of its setting.
type rawConfig struct {
	Mode                  string              `yaml:"mode"`
	Listen                string              `yaml:"listen"`
	MetricsListen         string              `yaml:"metrics_listen"`
	MySQLDSN              string              `yaml:"mysql_dsn"`
	Secret                yaml.Node           `yaml:"secret"`
	SecretID              string              `yaml:"secret_id"`
	PreviousSecrets       yaml.Node           `yaml:"previous_secrets"`
	APIKeys               map[string][]string `yaml:"api_keys"`
	CORSOrigins           []string            `yaml:"cors_origins"`
	MaxBodyBytes          *int64              `yaml:"max_body_bytes"`
	MaxWait               string              `yaml:"max_wait"`
	MaxWaiters            *int                `yaml:"max_waiters"`
	MaxLiveStreams        *int                `yaml:"max_live_streams"`
	RetryAfter            string              `yaml:"retry_after"`
	UnavailableRetryAfter string              `yaml:"unavailable_retry_after"`
	ShutdownGrace         string              `yaml:"shutdown_grace"`
	StoreTimeout          string              `yaml:"store_timeout"`
	ReplayCacheSize       *int                `yaml:"replay_cache_size"`
	ReplayCacheMaxAge     string              `yaml:"replay_cache_max_age"`
	ReplayCacheBytes      int64               `yaml:"replay_cache_bytes"`
	ReplayCacheTenant     int64               `yaml:"replay_cache_tenant_bytes"`
	Pool                  rawPool             `yaml:"pool"`
	Defaults              rawSettings         `yaml:"defaults"`
	OpenAI                rawOpenAI           `yaml:"openai"`
	Anthropic             rawAnthropic        `yaml:"anthropic"`
	Upstream              rawUpstream         `yaml:"upstream"`
	Scopes                []rawScope          `yaml:"scopes"`
	MCP                   rawMCP              `yaml:"mcp"`
	JWT                   rawJWT              `yaml:"jwt"`
	Audit                 rawAudit            `yaml:"audit"`
	AuthFailures          rawAuthFailures     `yaml:"auth_failures"`
	Limits                rawLimits           `yaml:"limits"`
	Doors                 []rawDoor           `yaml:"doors"`
	AllowInsecureUpstream *bool               `yaml:"allow_insecure_upstreams"`
}

type rawAuthFailures struct {
	Max        *int   `yaml:"max"`
	Window     string `yaml:"window"`
	MaxClients *int   `yaml:"max_clients"`
}

type rawAudit struct {
	Log   string `yaml:"log"`
	Table *bool  `yaml:"table"`
}

type rawJWT struct {
	JWKSURL     string   `yaml:"jwks_url"`
	Issuer      string   `yaml:"issuer"`
	Audience    string   `yaml:"audience"`
	TenantClaim string   `yaml:"tenant_claim"`
	Leeway      string   `yaml:"leeway"`
	Algorithms  []string `yaml:"algorithms"`
	Tenants     []string `yaml:"tenants"`
}

type rawPool struct {
	MaxOpenConns    int    `yaml:"max_open_conns"`
	MaxIdleConns    int    `yaml:"max_idle_conns"`
	ConnMaxLifetime string `yaml:"conn_max_lifetime"`
}

type rawSettings struct {
	TTL         string `yaml:"ttl"`
	StaleAfter  string `yaml:"stale_after"`
	MaxAttempts int    `yaml:"max_attempts"`
	StalePolicy string `yaml:"stale_policy"`
	// ProgressStages: idemguard.Settings.ProgressStages.
	ProgressStages []string `yaml:"progress_stages"`
	// AllowReset lets a finished key run again on request (DELETE of the
	// key, Idempotency-Force-New); off unless set (idemguard.Settings).
	AllowReset bool `yaml:"allow_reset"`
}

type rawOpenAI struct {
	BaseURL    string    `yaml:"base_url"`
	Model      string    `yaml:"model"`
	APIKey     yaml.Node `yaml:"api_key"`
	Timeout    string    `yaml:"timeout"`
	MaxTokens  int       `yaml:"max_tokens"`
	ActorField string    `yaml:"actor_field"`
}

type rawUpstream struct {
	URL     string            `yaml:"url"`
	Timeout string            `yaml:"timeout"`
	Headers map[string]string `yaml:"headers"`
}

type rawScope struct {
	Name           string `yaml:"name"`
	Operation      string `yaml:"operation"`
	rawSettings    `yaml:",inline"`
	KeyRequired    bool             `yaml:"key_required"`
	Timeout        string           `yaml:"timeout"`
	Delay          string           `yaml:"delay"`
	URL            string           `yaml:"url"`
	Auth           []string         `yaml:"auth"`
	Isolation      string           `yaml:"isolation"`
	Prices         Prices           `yaml:"prices"`
	Limits         rawLimit         `yaml:"limits"`
	rawScopeAccess `yaml:",inline"` // mcp.go
}

// problems collects configuration errors, each naming its setting.
type problems []error

func (p *problems) add(setting, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", setting, fmt.Sprintf(format, args...)))
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("config: %d problem(s):\n%w", len(p), errors.Join(p...))
}

// Load reads the YAML file at path (or at $IDEMGUARD_CONFIG when path is
// empty; no file at all is fine), applies the environment overrides read with
// getenv, fills in defaults and validates the result. The error lists every
// bad setting by name, one per line, and never contains a secret.
func Load(path string, getenv func(string) string) (*Config, error) {
	env := func(k string) string { return strings.TrimSpace(getenv(k)) }
	if path == "" {
		path = env(EnvConfig)
	}
	var raw rawConfig
	var p problems
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: read %s: %w", path, err)
		}
		if err := decodeYAML(b, &raw, &p); err != nil {
			return nil, fmt.Errorf("config: %s: %w", path, err)
		}
	}
	p.noSecretsInFile(&raw)
	apiKeysSetting := p.applyEnv(&raw, env)

	c := &Config{Source: path}
	c.fromRaw(&raw, env, &p)
	c.scopesFromRaw(raw.Scopes, &p)
	c.accessFromRaw(&raw, &p)
	c.limitsFromRaw(raw.Limits)
	c.MCP = MCP{Path: strings.TrimSpace(raw.MCP.Path)}
	c.doorsFromRaw(raw.Doors, &p)
	c.anthropicFromRaw(&raw.Anthropic, env, &p)
	c.apiKeysFromRaw(raw.APIKeys, apiKeysSetting, &p)
	p = append(p, c.validate(apiKeysSetting)...)
	c.loadSecrets(raw.SecretID, getenv, &p)
	if err := p.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// noSecretsInFile reports the secrets that were put in the config file:
// they are read from the environment only.
func (p *problems) noSecretsInFile(raw *rawConfig) {
	if raw.Secret.Kind != 0 {
		p.add("secret", "is never read from the config file; remove it and set the environment variable %s", EnvSecret)
	}
	if raw.PreviousSecrets.Kind != 0 {
		p.add("previous_secrets", "is never read from the config file; remove it and set the environment variable %s", EnvPreviousSecrets)
	}
	if raw.OpenAI.APIKey.Kind != 0 {
		p.add("openai.api_key", "is never read from the config file; remove it and set %s (or %s)", EnvOpenAIAPIKey, EnvOpenAIAPIKeyStd)
	}

}

// applyEnv overrides raw's settings with the environment's, read with env,
// and returns the name the API keys are reported under (api_keys, or the
// environment variable they came from).
func (p *problems) applyEnv(raw *rawConfig, env func(string) string) (apiKeysSetting string) {
	override := func(dst *string, key string) {
		if v := env(key); v != "" {
			*dst = v
		}
	}
	override(&raw.Mode, EnvMode)
	override(&raw.Listen, EnvListen)
	override(&raw.MetricsListen, EnvMetricsListen)
	override(&raw.MySQLDSN, EnvMySQLDSN)
	override(&raw.SecretID, EnvSecretID)
	override(&raw.OpenAI.BaseURL, EnvOpenAIBaseURL)
	override(&raw.OpenAI.Model, EnvOpenAIModel)
	override(&raw.Upstream.URL, EnvUpstreamURL)
	override(&raw.JWT.JWKSURL, EnvJWTJWKSURL)
	override(&raw.JWT.Issuer, EnvJWTIssuer)
	override(&raw.JWT.Audience, EnvJWTAudience)
	override(&raw.Audit.Log, EnvAuditLog)
	if v := env(EnvAllowInsecureUpstreams); v != "" {
		if b, err := strconv.ParseBool(v); err != nil {
			p.add(EnvAllowInsecureUpstreams, "must be true or false, got %q", truncate(v, 20))
		} else {
			raw.AllowInsecureUpstream = &b
		}
	}
	if v := env(EnvAuditTable); v != "" {
		if b, err := strconv.ParseBool(v); err != nil {
			p.add(EnvAuditTable, "must be true or false, got %q", truncate(v, 20))
		} else {
			raw.Audit.Table = &b
		}
	}
	if v := env(EnvCORSOrigins); v != "" {
		raw.CORSOrigins = splitList(v)
	}
	apiKeysSetting = "api_keys"
	if v := env(EnvAPIKeys); v != "" {
		apiKeysSetting = EnvAPIKeys
		keys, err := parseAPIKeysEnv(v)
		if err != nil {
			p.add(EnvAPIKeys, "%v", err)
		}
		raw.APIKeys = keys
	}

	return apiKeysSetting
}

// fromRaw fills c's service settings from raw, with their defaults; env
// reads the environment (the OpenAI key).
func (c *Config) fromRaw(raw *rawConfig, env func(string) string, p *problems) {
	if strings.TrimSpace(raw.Mode) == "" {
		if what := productionLike(raw); len(what) > 0 {
			// Fail safe: development mode accepts a public key and migrates
			// the database; a production configuration that lost its mode
			// line must not start that way. The other settings are still
			// checked (as development would), so every problem is listed.
			p.add("mode", "is not set, but the configuration has production settings (%s): set mode: production "+
				"in the config file (or %s=production); set mode: development explicitly only to run these settings "+
				"in development mode (public demo key, automatic migrations)", strings.Join(what, ", "), EnvMode)
		}
	}
	c.Mode = Mode(strings.ToLower(cmpOr(raw.Mode, string(Development))))
	c.AllowInsecureUpstreams = raw.AllowInsecureUpstream != nil && *raw.AllowInsecureUpstream
	c.Listen = cmpOr(raw.Listen, DefaultListen)
	c.MetricsListen = strings.TrimSpace(cmpOr(raw.MetricsListen, DefaultMetricsListen))
	c.MySQLDSN = raw.MySQLDSN
	c.CORSOrigins = raw.CORSOrigins
	c.MaxBodyBytes = DefaultMaxBodyBytes
	if raw.MaxBodyBytes != nil {
		c.MaxBodyBytes = *raw.MaxBodyBytes
	}
	c.MaxWait = p.duration("max_wait", raw.MaxWait, DefaultMaxWait)
	c.MaxWaiters = idemguard.DefaultMaxWaiters
	if raw.MaxWaiters != nil {
		c.MaxWaiters = *raw.MaxWaiters
	}
	c.MaxLiveStreams = idemguard.DefaultMaxLiveStreams
	if raw.MaxLiveStreams != nil {
		c.MaxLiveStreams = *raw.MaxLiveStreams
	}
	c.RetryAfter = p.duration("retry_after", raw.RetryAfter, DefaultRetryAfter)
	c.UnavailableRetryAfter = p.duration("unavailable_retry_after", raw.UnavailableRetryAfter, DefaultUnavailableRetryAfter)
	c.ShutdownGrace = p.duration("shutdown_grace", raw.ShutdownGrace, DefaultShutdownGrace)
	c.StoreTimeout = p.duration("store_timeout", raw.StoreTimeout, idemguard.DefaultStoreTimeout)
	c.ReplayCacheSize = DefaultReplayCacheSize
	if raw.ReplayCacheSize != nil {
		c.ReplayCacheSize = *raw.ReplayCacheSize
	}
	c.ReplayCacheMaxAge = p.duration("replay_cache_max_age", raw.ReplayCacheMaxAge, DefaultReplayCacheMaxAge)
	c.ReplayCacheBytes = cmp.Or(raw.ReplayCacheBytes, idemguard.DefaultReplayCacheBytes)
	c.ReplayCacheTenantBytes = cmp.Or(raw.ReplayCacheTenant, c.ReplayCacheBytes/2)
	c.Pool = mysqlconn.PoolConfig{
		MaxOpenConns:    raw.Pool.MaxOpenConns,
		MaxIdleConns:    raw.Pool.MaxIdleConns,
		ConnMaxLifetime: p.duration("pool.conn_max_lifetime", raw.Pool.ConnMaxLifetime, 0),
	}
	c.Defaults = p.settings("defaults", raw.Defaults)
	c.upstreamsFromRaw(raw, env, p)
}

// upstreamsFromRaw fills c's OpenAI and JSON upstream settings from raw,
// with their defaults; env reads the OpenAI key.
func (c *Config) upstreamsFromRaw(raw *rawConfig, env func(string) string, p *problems) {
	c.OpenAI = OpenAI{
		BaseURL:   strings.TrimRight(cmpOr(raw.OpenAI.BaseURL, DefaultOpenAIBaseURL), "/"),
		Model:     raw.OpenAI.Model,
		APIKey:    cmpOr(env(EnvOpenAIAPIKey), env(EnvOpenAIAPIKeyStd)),
		Timeout:   p.duration("openai.timeout", raw.OpenAI.Timeout, DefaultOpenAITimeout),
		MaxTokens: raw.OpenAI.MaxTokens,
	}
	switch f := strings.TrimSpace(raw.OpenAI.ActorField); f {
	case "", "safety_identifier", "user":
		c.OpenAI.ActorField = f
	default:
		p.add("openai.actor_field", "must be safety_identifier, user or empty (send no actor), got %q", truncate(f, 30))
	}
	c.Upstream = Upstream{
		URL:     raw.Upstream.URL,
		Timeout: p.duration("upstream.timeout", raw.Upstream.Timeout, DefaultUpstreamTimeout),
		Headers: raw.Upstream.Headers,
	}
}

// scopesFromRaw adds the configured scopes to c, with their defaults.
func (c *Config) scopesFromRaw(scopes []rawScope, p *problems) {
	for i, s := range scopes {
		at := fmt.Sprintf("scopes[%d]", i)
		sc := Scope{
			Name:        s.Name,
			Operation:   Operation(s.Operation),
			Settings:    p.settings(at, s.rawSettings),
			KeyRequired: s.KeyRequired,
			Timeout:     p.duration(at+".timeout", s.Timeout, 0),
			Delay:       p.duration(at+".delay", s.Delay, 0),
			URL:         s.URL,
			Auth:        p.methods(at+".auth", s.Auth),
			Isolation:   p.isolation(at+".isolation", s.Isolation),
			Prices:      s.Prices,
			Limits:      s.Limits.limit(Limit{}),
			Tenants:     s.tenantIDs(), // mcp.go
			Async:       s.Async,
		}
		if s.Prices.PromptPerMillion < 0 || s.Prices.CompletionPerMillion < 0 {
			p.add(at+".prices", "prices per million tokens must not be negative")
		}
		if sc.Operation == OpDemo && sc.Delay == 0 {
			sc.Delay = DefaultDemoDelay
		}
		c.Scopes = append(c.Scopes, sc)
	}
}

// accessFromRaw fills c's access settings from raw (JWT, audit, the
// failed-authentication limit) and adds the demo scopes in development mode.
func (c *Config) accessFromRaw(raw *rawConfig, p *problems) {
	c.JWT = JWT{
		JWKSURL:     strings.TrimSpace(raw.JWT.JWKSURL),
		Issuer:      strings.TrimSpace(raw.JWT.Issuer),
		Audience:    strings.TrimSpace(raw.JWT.Audience),
		TenantClaim: cmpOr(raw.JWT.TenantClaim, auth.DefaultTenantClaim),
		Leeway:      p.duration("jwt.leeway", raw.JWT.Leeway, auth.DefaultJWTLeeway),
		Algorithms:  raw.JWT.Algorithms,
	}
	if len(c.JWT.Algorithms) == 0 {
		c.JWT.Algorithms = slices.Clone(auth.DefaultJWTAlgorithms)
	}
	for i, t := range raw.JWT.Tenants {
		id, err := tenancy.ParseID(strings.TrimSpace(t))
		if err != nil {
			p.add(fmt.Sprintf("jwt.tenants[%d]", i), "%v", err)
			continue
		}
		if !slices.Contains(c.JWT.Tenants, id) {
			c.JWT.Tenants = append(c.JWT.Tenants, id)
		}
	}
	c.Audit = Audit{Log: cmpOr(raw.Audit.Log, AuditLogOff), Table: raw.Audit.Table == nil || *raw.Audit.Table}
	c.AuthFailures = AuthFailures{Max: DefaultAuthFailuresMax, MaxClients: DefaultAuthFailuresMaxClients,
		Window: p.duration("auth_failures.window", raw.AuthFailures.Window, DefaultAuthFailuresWindow)}
	if raw.AuthFailures.Max != nil {
		c.AuthFailures.Max = *raw.AuthFailures.Max
	}
	if raw.AuthFailures.MaxClients != nil {
		c.AuthFailures.MaxClients = *raw.AuthFailures.MaxClients
	}
	if c.Mode == Development && !c.hasScope(DemoScope) {
		c.Scopes = append(c.Scopes, Scope{Name: DemoScope, Operation: OpDemo, Delay: DefaultDemoDelay})
	}
	if c.Mode == Development && !c.hasScope(DemoJobScope) {
		c.Scopes = append(c.Scopes, demoJobScope())
	}

}

// apiKeysFromRaw fills c.APIKeys from the configured digests per tenant.
func (c *Config) apiKeysFromRaw(apiKeys map[string][]string, apiKeysSetting string, p *problems) {
	c.APIKeys = make(map[tenancy.ID][]string, len(apiKeys))
	for tenant, digests := range apiKeys {
		id, err := tenancy.ParseID(tenant)
		if err != nil {
			p.add(fmt.Sprintf("%s.%s", apiKeysSetting, truncate(tenant, 64)), "%v", err)
			continue
		}
		for _, d := range digests {
			c.APIKeys[id] = append(c.APIKeys[id], normalizeKeyEntry(d))
		}
	}
}

// loadSecrets reads the HMAC secret and the previous secrets with getenv.
func (c *Config) loadSecrets(secretID string, getenv func(string) string, p *problems) {
	// The secret last: whether it may be generated depends on a valid mode.
	if c.Mode == Development || c.Mode == Production {
		secret, generated, err := Secret(getenv(EnvSecret), c.Mode == Development)
		if err != nil {
			*p = append(*p, err)
		}
		c.Secret, c.SecretGenerated = secret, generated
		c.SecretID = secretID
		previous, err := PreviousSecrets(getenv(EnvPreviousSecrets))
		if err == nil {
			err = checkSecrets(c.Secret, c.SecretID, previous)
		}
		if err != nil {
			*p = append(*p, err)
		}
		c.PreviousSecrets = previous
	}
}

// Validate reports every setting of c that is out of range, one per line,
// each named as in the config file (e.g. "scopes[2].stale_after: must be at
// least 300ms"). Load applies the same checks; call Validate after changing a Config.
func (c *Config) Validate() error {
	p := c.validate("api_keys")
	if len(c.Secret) > 0 || c.Mode == Production {
		if _, _, err := Secret(string(c.Secret), false); err != nil {
			p = append(p, err)
		}
	}
	if err := checkSecrets(c.Secret, c.SecretID, c.PreviousSecrets); err != nil {
		p = append(p, err)
	}
	return p.err()
}

func (c *Config) validate(apiKeysSetting string) problems {
	var p problems
	c.validateServer(&p)
	c.validateAPIKeys(apiKeysSetting, &p)
	p = append(p, c.validateJWT()...)
	c.validateLimits(&p)
	c.validateTenantLimits(&p)
	c.validateMCP(&p)
	uses := c.validateScopes(&p)
	c.validateUpstreams(uses, &p)
	c.validateAnthropic(uses[OpAnthropicMessages], &p)
	c.validateDoors(&p)
	return p
}

// validateServer checks the mode, the listen address and the database.
func (c *Config) validateServer(p *problems) {
	switch c.Mode {
	case Development, Production:
	default:
		p.add("mode", "must be %q or %q, got %q (env %s)", Development, Production, c.Mode, EnvMode)
	}
	p.listen("listen", c.Listen, "127.0.0.1:8080, :8080")
	if c.MetricsListen != MetricsListenOff {
		p.listen("metrics_listen", c.MetricsListen, "127.0.0.1:9090, :9090, or off")
		if c.MetricsListen == c.Listen && !strings.HasSuffix(c.Listen, ":0") {
			p.add("metrics_listen", "must differ from listen: the operator's routes are never on the API's listener")
		}
	}
	if c.MySQLDSN != "" {
		if _, err := mysqlconn.NormalizeDSN(c.MySQLDSN); err != nil {
			p.add("mysql_dsn", "%v", err) // mysqlconn redacts the password
		}
	} else if c.Mode == Production {
		p.add("mysql_dsn", "is required in production mode: set %s (or mysql_dsn in the config file), "+
			"e.g. user:password@tcp(db:3306)/idemguard", EnvMySQLDSN)
	}

}

// listen checks a host:port address.
func (p *problems) listen(setting, addr, examples string) {
	if _, port, err := net.SplitHostPort(addr); err != nil {
		p.add(setting, "must be host:port (e.g. %s), got %q", examples, truncate(addr, 64))
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		p.add(setting, "port must be a number from 0 to 65535, got %q", truncate(port, 16))
	}
}

// validateAPIKeys checks the API-key digests, reported under apiKeysSetting.
func (c *Config) validateAPIKeys(apiKeysSetting string, p *problems) {
	total := 0
	owner := make(map[string]tenancy.ID)
	for tenant, digests := range c.APIKeys {
		if !tenant.Valid() {
			p.add(apiKeysSetting, "tenant %q is not a valid tenant id", truncate(string(tenant), 64))
		}
		if len(digests) == 0 {
			p.add(fmt.Sprintf("%s.%s", apiKeysSetting, tenant), "lists no key digest")
		}
		for i, entry := range digests {
			_, d, err := auth.ParseKeyEntry(entry)
			if err != nil {
				p.add(fmt.Sprintf("%s.%s[%d]", apiKeysSetting, tenant, i), "%v", err)
				continue
			}
			if weak := c.weakDigest(d); weak != "" {
				p.add(fmt.Sprintf("%s.%s[%d]", apiKeysSetting, tenant, i), "%s", weak)
				continue
			}
			if !isSHA256Hex(d) {
				p.add(fmt.Sprintf("%s.%s[%d]", apiKeysSetting, tenant, i), "must be the hex SHA-256 digest of an API key "+
					"(64 hex digits, e.g. printf %%s \"$KEY\" | sha256sum), not the key itself")
				continue
			}
			if other, dup := owner[d]; dup && other != tenant {
				p.add(fmt.Sprintf("%s.%s[%d]", apiKeysSetting, tenant, i), "the same key digest is also configured for tenant %q; "+
					"a key must identify one tenant", other)
			}
			owner[d] = tenant
			total++
		}
	}
	if c.Mode == Production && total == 0 && !c.JWT.Enabled() {
		p.add("api_keys", "production mode needs at least one tenant API key: set %s=tenant:<sha256 hex>[,tenant:<sha256 hex>...] "+
			"(or api_keys in the config file), or configure jwt for browsers", EnvAPIKeys)
	}
}

// validateLimits checks the CORS origins, the limits and the timings.
func (c *Config) validateLimits(p *problems) {
	for i, o := range c.CORSOrigins {
		if err := checkOrigin(o); err != nil {
			p.add(fmt.Sprintf("cors_origins[%d]", i), "%v", err)
		}
	}
	if c.MaxBodyBytes < 1 || c.MaxBodyBytes > MaxMaxBodyBytes {
		p.add("max_body_bytes", "must be between 1 and %d, got %d", MaxMaxBodyBytes, c.MaxBodyBytes)
	}
	p.between("max_wait", c.MaxWait, time.Second, MaxMaxWait)
	if c.MaxWaiters < 1 || c.MaxWaiters > 100_000 {
		p.add("max_waiters", "must be between 1 and 100000, got %d", c.MaxWaiters)
	}
	if c.MaxLiveStreams < 1 || c.MaxLiveStreams > 100_000 {
		p.add("max_live_streams", "must be between 1 and 100000, got %d", c.MaxLiveStreams)
	}
	p.between("retry_after", c.RetryAfter, time.Second, time.Hour)
	p.between("unavailable_retry_after", c.UnavailableRetryAfter, time.Second, time.Hour)
	p.between("shutdown_grace", c.ShutdownGrace, 0, time.Hour)
	p.between("store_timeout", c.StoreTimeout, time.Millisecond, MaxStoreTimeout)
	if c.ReplayCacheSize < -1 {
		p.add("replay_cache_size", "must be -1 (off), 0 (default %d) or positive, got %d", DefaultReplayCacheSize, c.ReplayCacheSize)
	}
	p.between("replay_cache_max_age", c.ReplayCacheMaxAge, time.Second, idemguard.MaxTTL)
	if c.ReplayCacheBytes < 1<<20 || c.ReplayCacheBytes > 1<<40 {
		p.add("replay_cache_bytes", "must be between 1 MiB (1048576) and 1 TiB, got %d", c.ReplayCacheBytes)
	}
	if c.ReplayCacheTenantBytes < 64<<10 || c.ReplayCacheTenantBytes > c.ReplayCacheBytes {
		p.add("replay_cache_tenant_bytes", "must be between 64 KiB (65536) and replay_cache_bytes (%d), got %d", c.ReplayCacheBytes, c.ReplayCacheTenantBytes)
	}
	if c.Pool.MaxOpenConns < 0 {
		p.add("pool.max_open_conns", "must not be negative (0: default %d), got %d", mysqlconn.DefaultMaxOpenConns, c.Pool.MaxOpenConns)
	}
	if c.Pool.MaxIdleConns < 0 {
		p.add("pool.max_idle_conns", "must not be negative (0: same as max_open_conns), got %d", c.Pool.MaxIdleConns)
	}
	p.between("pool.conn_max_lifetime", c.Pool.ConnMaxLifetime, 0, 24*time.Hour)
	p.checkSettings("defaults", c.Defaults)
	if c.AuthFailures.Max != -1 && (c.AuthFailures.Max < 1 || c.AuthFailures.Max > 10_000) {
		p.add("auth_failures.max", "must be between 1 and 10000, or -1 (no limit), got %d", c.AuthFailures.Max)
	}
	p.between("auth_failures.window", c.AuthFailures.Window, time.Second, 24*time.Hour)
	if c.AuthFailures.MaxClients < 1 || c.AuthFailures.MaxClients > MaxAuthFailuresMaxClients {
		p.add("auth_failures.max_clients", "must be between 1 and %d, got %d", MaxAuthFailuresMaxClients, c.AuthFailures.MaxClients)
	}

}

// validateScopes checks every scope and returns the operations they use.
func (c *Config) validateScopes(p *problems) map[Operation]bool {
	uses := map[Operation]bool{}
	seen := map[string]int{}
	for i, s := range c.Scopes {
		at := fmt.Sprintf("scopes[%d]", i)
		if err := keys.ValidateScope(s.Name); err != nil {
			p.add(at+".name", "%v", err)
		} else if j, dup := seen[s.Name]; dup {
			p.add(at+".name", "scope %q is already defined by scopes[%d]", s.Name, j)
		} else {
			seen[s.Name] = i
		}
		switch s.Operation {
		case OpOpenAIChat, OpAnthropicMessages, OpHTTPJSON, OpDemo:
			uses[s.Operation] = true
		case "":
			p.add(at+".operation", "is required: one of %s, %s, %s, %s", OpOpenAIChat, OpAnthropicMessages, OpHTTPJSON, OpDemo)
		default:
			p.add(at+".operation", "must be one of %s, %s, %s, %s, got %q", OpOpenAIChat, OpAnthropicMessages, OpHTTPJSON, OpDemo, s.Operation)
		}
		p.checkSettings(at, s.Settings)
		p.between(at+".timeout", s.Timeout, 0, MaxOperationTimeout)
		if s.Operation == OpDemo {
			p.between(at+".delay", s.Delay, 0, MaxDemoDelay)
		} else if s.Delay != 0 {
			p.add(at+".delay", "only a demo scope has a delay")
		}
		switch {
		case s.URL != "" && s.Operation != OpHTTPJSON:
			p.add(at+".url", "only an http_json scope has a url")
		case s.URL != "":
			if err := checkHTTPURL(s.URL); err != nil {
				p.add(at+".url", "%v", err)
			}
			c.checkProviderURL(p, at+".url", s.URL)
		case s.Operation == OpHTTPJSON && c.Upstream.URL == "":
			p.add(at+".url", "an http_json scope needs a url: set upstream.url (or %s), or url on the scope", EnvUpstreamURL)
		}
	}
	return uses
}

// validateProvider checks one provider's settings (name: its section;
// op: the operation its scopes use): its base URL and model when used, its
// timeout and max_tokens always.
func (c *Config) validateProvider(p *problems, used bool, name, op, baseURL, model, envURL, envModel string,
	timeout time.Duration, maxTokens int) {
	if used {
		if err := checkHTTPURL(baseURL); err != nil {
			p.add(name+".base_url", "%v (env %s)", err, envURL)
		}
		c.checkProviderURL(p, name+".base_url", baseURL)
		if strings.TrimSpace(model) == "" {
			p.add(name+".model", "is required by the %s scopes: set it, or %s", op, envModel)
		}
	}
	p.between(name+".timeout", timeout, time.Millisecond, MaxOperationTimeout)
	if maxTokens < 0 {
		p.add(name+".max_tokens", "must not be negative (0: no cap), got %d", maxTokens)
	}
}

// validateUpstreams checks the upstreams of the operations in uses.
func (c *Config) validateUpstreams(uses map[Operation]bool, p *problems) {
	c.validateProvider(p, uses[OpOpenAIChat], "openai", "openai_chat", c.OpenAI.BaseURL, c.OpenAI.Model,
		EnvOpenAIBaseURL, EnvOpenAIModel, c.OpenAI.Timeout, c.OpenAI.MaxTokens)
	if c.Upstream.URL != "" {
		if err := checkHTTPURL(c.Upstream.URL); err != nil {
			p.add("upstream.url", "%v (env %s)", err, EnvUpstreamURL)
		}
		c.checkProviderURL(p, "upstream.url", c.Upstream.URL)
	}
	p.between("upstream.timeout", c.Upstream.Timeout, time.Millisecond, MaxOperationTimeout)
	for name := range c.Upstream.Headers {
		if !validHeaderName(name) {
			p.add("upstream.headers", "%q is not a valid HTTP header name", truncate(name, 64))
		}
	}
}

// Placeholder marks the API-key digests of the example configuration, which
// must be replaced before it starts.
const Placeholder = "REPLACE_WITH_SHA256_OF_A_RANDOM_KEY"

// weakKeys are keys anyone would guess. Production refuses their digests;
// no mode accepts the public demo key's digest for a configured tenant.
var weakKeys = []string{"", "foo", "bar", "baz", "test", "testing", "password", "secret", "changeme", "admin",
	"demo", "key", "apikey", "api-key", "api_key", "123456", "12345678", "letmein", "qwerty", "example", "default"}

var weakDigests = func() map[string]bool {
	m := make(map[string]bool, len(weakKeys))
	for _, k := range weakKeys {
		m[auth.HashAPIKey(k)] = true
	}
	return m
}()

// generateKeyHint says how to make a key and its digest.
const generateKeyHint = "generate a random key (e.g. KEY=$(openssl rand -hex 32)) and configure its digest " +
	"(printf %s \"$KEY\" | sha256sum)"

// weakDigest says why the API-key digest d may not be configured, or "".
// It never names the key behind a weak digest.
func (c *Config) weakDigest(d string) string {
	d = strings.ToLower(strings.TrimSpace(d))
	switch {
	case strings.Contains(d, strings.ToLower(Placeholder)), strings.Contains(d, "replace_with"):
		return "is a placeholder of the example configuration: " + generateKeyHint
	case d == auth.HashAPIKey(DemoAPIKey):
		return "is the digest of the public development demo key, which is accepted for the demo tenant only: " + generateKeyHint
	case c.Mode == Production && weakDigests[d]:
		return "is the digest of a known weak key (a common word, a short number or the empty string), refused in production mode: " + generateKeyHint
	}
	return ""
}

// productionLike names the settings of raw that only a deployment has: a
// database, API keys, JWT settings, scopes that run a real operation (a
// demo-operation scope calls nothing outside the process). Without
// them (and without a mode) the service starts in development mode.
func productionLike(raw *rawConfig) []string {
	var what []string
	if strings.TrimSpace(raw.MySQLDSN) != "" {
		what = append(what, "mysql_dsn")
	}
	if len(raw.APIKeys) > 0 {
		what = append(what, "api_keys")
	}
	if strings.TrimSpace(raw.JWT.JWKSURL) != "" || strings.TrimSpace(raw.JWT.Issuer) != "" || strings.TrimSpace(raw.JWT.Audience) != "" {
		what = append(what, "jwt")
	}
	for _, s := range raw.Scopes {
		if Operation(strings.TrimSpace(s.Operation)) != OpDemo {
			what = append(what, "scopes with operations other than "+string(OpDemo))
			break
		}
	}
	return what
}

func (c *Config) hasScope(name string) bool {
	for _, s := range c.Scopes {
		if s.Name == name {
			return true
		}
	}
	return false
}

// DemoScopes names the scopes development mode's public demo key is
// accepted on: DemoScope and DemoJobScope, when they run the demo operation
// (a scope of that name configured with a real operation is not one).
func (c *Config) DemoScopes() []string {
	var out []string
	for _, s := range c.Scopes {
		if (s.Name == DemoScope || s.Name == DemoJobScope) && s.Operation == OpDemo {
			out = append(out, s.Name)
		}
	}
	return out
}

// DevelopmentWithoutDatabase reports whether the service runs on the
// in-memory store.
func (c *Config) DevelopmentWithoutDatabase() bool { return c.Mode == Development && c.MySQLDSN == "" }

func (p *problems) duration(setting, s string, def time.Duration) time.Duration {
	s = strings.TrimSpace(s)
	if s == "" {
		return def
	}
	d, err := ParseDuration(s)
	if err != nil {
		p.add(setting, "%q is not a duration; write a number with a unit, e.g. 300ms, 30s, 5m, 24h, 7d", truncate(s, 64))
		return def
	}
	return d
}

func (p *problems) between(setting string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		p.add(setting, "must be between %s and %s, got %s", lo, hi, d)
	}
}

func (p *problems) settings(at string, r rawSettings) idemguard.Settings {
	return idemguard.Settings{
		TTL:            p.duration(at+".ttl", r.TTL, 0),
		StaleAfter:     p.duration(at+".stale_after", r.StaleAfter, 0),
		MaxAttempts:    r.MaxAttempts,
		StalePolicy:    idemguard.StalePolicy(strings.TrimSpace(r.StalePolicy)),
		ProgressStages: r.ProgressStages,
		AllowReset:     r.AllowReset,
	}
}

// checkSettings mirrors idemguard.Settings.Validate with the config's names.
func (p *problems) checkSettings(at string, s idemguard.Settings) {
	before := len(*p)
	if s.TTL != 0 && (s.TTL < time.Second || s.TTL > idemguard.MaxTTL) {
		p.add(at+".ttl", "must be between 1s and %s, got %s", idemguard.MaxTTL, s.TTL)
	}
	if s.StaleAfter < 0 || (s.StaleAfter != 0 && s.StaleAfter < idemguard.MinStaleAfter) {
		p.add(at+".stale_after", "must be at least %s, got %s", idemguard.MinStaleAfter, s.StaleAfter)
	}
	if s.MaxAttempts < 0 || s.MaxAttempts > 100 {
		p.add(at+".max_attempts", "must be between 1 and 100 (0: default %d), got %d", idemguard.DefaultMaxAttempts, s.MaxAttempts)
	}
	switch s.StalePolicy {
	case "", idemguard.StaleTakeover, idemguard.StaleFail:
	default:
		p.add(at+".stale_policy", "must be %q or %q, got %q", idemguard.StaleTakeover, idemguard.StaleFail, truncate(string(s.StalePolicy), 64))
	}
	if err := s.Validate(); err != nil && len(*p) == before {
		p.add(at, "%v", err) // a rule above missed; never accept what the engine rejects
	}
}

// decodeYAML decodes b into out. A file that is not YAML is an error; unknown settings and
// values of the wrong type go to p, each naming its setting, with the other problems.
func decodeYAML(b []byte, out *rawConfig, p *problems) error {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file
		}
		return fmt.Errorf("%w (settings are listed in docs/CONFIGURATION.md)", err)
	}
	found := checkYAMLSettings(&doc, p)
	if err := doc.Decode(out); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return fmt.Errorf("%w (settings are listed in docs/CONFIGURATION.md)", err)
		}
		if !found { // the walk names the setting; yaml's own message only as a fallback
			for _, msg := range te.Errors {
				p.add("config file", "%s", goTypeNames.ReplaceAllString(msg, ""))
			}
		}
	}
	return nil
}

// goTypeNames matches the Go type at the end of yaml's messages ("into config.rawPool"), which
// means nothing to an operator.
var goTypeNames = regexp.MustCompile(` into \S+$`)

// normalizeKeyEntry trims an api_keys entry, "<hex>" or "<name>=<hex>",
// and lower-cases its digest (never its name).
func normalizeKeyEntry(entry string) string {
	name, digest, named := strings.Cut(strings.TrimSpace(entry), "=")
	if !named {
		return strings.ToLower(name)
	}
	return strings.TrimSpace(name) + "=" + strings.ToLower(strings.TrimSpace(digest))
}

// parseAPIKeysEnv parses "tenant:<hex>,tenant:<name>=<hex>,...".
func parseAPIKeysEnv(v string) (map[string][]string, error) {
	out := make(map[string][]string)
	for i, item := range splitList(v) {
		tenant, digest, ok := strings.Cut(item, ":")
		if !ok || strings.TrimSpace(tenant) == "" || strings.TrimSpace(digest) == "" {
			return nil, fmt.Errorf("entry %d is not tenant:<sha256 hex>; want e.g. acme:<64 hex digits>,globex:<64 hex digits>", i+1)
		}
		tenant = strings.TrimSpace(tenant)
		out[tenant] = append(out[tenant], strings.TrimSpace(digest))
	}
	return out, nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

func isSHA256Hex(s string) bool { return sha256Hex.MatchString(s) }

func checkOrigin(o string) error {
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("must be an exact origin like https://app.example.com (scheme, host, optional port; no path, no wildcard), got %q", truncate(o, 100))
	}
	return nil
}

func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("must be an http:// or https:// URL, got %q", truncate(redactURL(s), 100))
	}
	return nil
}

// redactURL drops user info, which may hold a password.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		u.User = url.User("xxxxx")
		return u.String()
	}
	return s
}

func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func cmpOr(a, b string) string {
	if strings.TrimSpace(a) != "" {
		return strings.TrimSpace(a)
	}
	return b
}

// DemoProgressStages are the stage names the demo operation reports with
// its progress (ops.DemoStages): the demo job scope's allowlist.
var DemoProgressStages = []string{"thinking", "writing"}

// Development mode's long-running demo job: 30 seconds, with a heartbeat
// (and so a cancel check, an "alive" event and its progress) every 2
// seconds.
const (
	DefaultDemoJobDelay      = 30 * time.Second
	DefaultDemoJobStaleAfter = 6 * time.Second
)

func demoJobScope() Scope {
	return Scope{Name: DemoJobScope, Operation: OpDemo, Delay: DefaultDemoJobDelay,
		Settings: idemguard.Settings{StaleAfter: DefaultDemoJobStaleAfter, ProgressStages: DemoProgressStages}}
}
