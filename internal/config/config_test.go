package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/auth"
	"github.com/idemguard/idemguard/tenancy"
)

const (
	digestA = "7b22029d5499e289878f545dd585a4e91cdf403fa66cd7b10a1b420dfb1617c2" // sha256("acme-test-key-7f3a")
	digestB = "9f55fc247cdc428f2025fda8203b5661b9c2fc3386737285ce39a7d7b463beba" // sha256("globex-test-key-91c2")
	secret  = "0123456789abcdef0123456789abcdef"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idemguard.yaml")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadDefaultsInDevelopment(t *testing.T) {
	t.Parallel()
	c, err := Load("", envOf(nil))
	require.NoError(t, err)
	require.Equal(t, Development, c.Mode)
	require.Equal(t, DefaultListen, c.Listen)
	require.True(t, c.DevelopmentWithoutDatabase())
	require.True(t, c.SecretGenerated, "development mode generates a secret")
	require.Len(t, c.Secret, 32)
	require.Equal(t, DefaultMaxBodyBytes, c.MaxBodyBytes)
	require.Equal(t, DefaultMaxWait, c.MaxWait)
	require.Equal(t, DefaultShutdownGrace, c.ShutdownGrace)
	require.Equal(t, idemguard.DefaultStoreTimeout, c.StoreTimeout)
	require.Equal(t, DefaultOpenAIBaseURL, c.OpenAI.BaseURL)
	require.Equal(t, []Scope{{Name: DemoScope, Operation: OpDemo, Delay: DefaultDemoDelay}, demoJobScope()}, c.Scopes)
	require.Empty(t, c.APIKeys, "the demo key is added by serve, not stored here")
	require.NoError(t, c.Validate())
}

func TestLoadFileAndEnvironment(t *testing.T) {
	t.Parallel()
	path := writeFile(t, `
mode: production
listen: 0.0.0.0:9000
mysql_dsn: file@tcp(db:3306)/idemguard
api_keys:
  acme: [`+strings.ToUpper(digestA)+`]
cors_origins: [https://app.example.com]
max_body_bytes: 2048
max_wait: 10s
retry_after: 2s
unavailable_retry_after: 7s
shutdown_grace: 5s
store_timeout: 2s
pool: {max_open_conns: 8, conn_max_lifetime: 1m}
defaults: {ttl: 48h, stale_after: 1m, max_attempts: 5, stale_policy: fail}
openai: {base_url: "https://127.0.0.1:1/v1/", model: gpt-x, timeout: 20s, max_tokens: 512}
upstream: {url: "https://127.0.0.1:2/op", timeout: 3s, headers: {X-Token: t}}
limits: {concurrent: 10, rate: 5.5, burst: 11, tenants: {acme: {jobs: 3}}}
scopes:
  - {name: chat, operation: openai_chat, key_required: true, ttl: 1h, stale_after: 2s, max_attempts: 2, stale_policy: takeover, timeout: 9s, limits: {concurrent: 2}}
  - {name: json, operation: http_json, url: "https://127.0.0.1:3/other"}
  - {name: slow, operation: demo, delay: 250ms}
`)
	c, err := Load(path, envOf(map[string]string{
		EnvSecret:       secret,
		EnvMySQLDSN:     "env@tcp(db:3306)/idemguard",
		EnvOpenAIAPIKey: "sk-test",
	}))
	require.NoError(t, err)
	require.Equal(t, path, c.Source)
	require.Equal(t, Production, c.Mode)
	require.Equal(t, "0.0.0.0:9000", c.Listen)
	require.Equal(t, "env@tcp(db:3306)/idemguard", c.MySQLDSN, "the environment overrides the file")
	require.Equal(t, []byte(secret), c.Secret)
	require.False(t, c.SecretGenerated)
	require.Equal(t, map[tenancy.ID][]string{"acme": {digestA}}, c.APIKeys, "digests are lower-cased")
	require.Equal(t, int64(2048), c.MaxBodyBytes)
	require.Equal(t, 10*time.Second, c.MaxWait)
	require.Equal(t, 2*time.Second, c.RetryAfter)
	require.Equal(t, 7*time.Second, c.UnavailableRetryAfter)
	require.Equal(t, 5*time.Second, c.ShutdownGrace)
	require.Equal(t, 2*time.Second, c.StoreTimeout)
	require.Equal(t, 8, c.Pool.MaxOpenConns)
	require.Equal(t, time.Minute, c.Pool.ConnMaxLifetime)
	require.Equal(t, idemguard.Settings{TTL: 48 * time.Hour, StaleAfter: time.Minute, MaxAttempts: 5, StalePolicy: idemguard.StaleFail}, c.Defaults)
	require.Equal(t, OpenAI{BaseURL: "https://127.0.0.1:1/v1", Model: "gpt-x", APIKey: "sk-test", Timeout: 20 * time.Second, MaxTokens: 512}, c.OpenAI)
	require.Equal(t, Upstream{URL: "https://127.0.0.1:2/op", Timeout: 3 * time.Second, Headers: map[string]string{"X-Token": "t"}}, c.Upstream)
	require.Equal(t, Limits{Tenant: Limit{Concurrent: 10, Jobs: DefaultLimitJobs, Rate: 5.5, Burst: 11},
		Tenants: map[tenancy.ID]Limit{"acme": {Concurrent: 10, Jobs: 3, Rate: 5.5, Burst: 11}}}, c.Limits)
	require.Equal(t, []Scope{
		{Name: "chat", Operation: OpOpenAIChat, KeyRequired: true, Timeout: 9 * time.Second, Limits: Limit{Concurrent: 2},
			Settings: idemguard.Settings{TTL: time.Hour, StaleAfter: 2 * time.Second, MaxAttempts: 2, StalePolicy: idemguard.StaleTakeover}},
		{Name: "json", Operation: OpHTTPJSON, URL: "https://127.0.0.1:3/other"},
		{Name: "slow", Operation: OpDemo, Delay: 250 * time.Millisecond},
	}, c.Scopes, "production mode adds no demo scope")
	require.NoError(t, c.Validate())
}

func TestLoadConfigPathFromEnvironment(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "listen: 127.0.0.1:0\n")
	c, err := Load("", envOf(map[string]string{EnvConfig: path}))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:0", c.Listen)
	require.Equal(t, path, c.Source)

	_, err = Load(filepath.Join(t.TempDir(), "missing.yaml"), envOf(nil))
	require.ErrorContains(t, err, "missing.yaml")
}

func TestLoadEnvironmentOverrides(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "api_keys: {file: ["+digestB+"]}\nscopes: [{name: c, operation: openai_chat}]\n")
	c, err := Load(path, envOf(map[string]string{
		EnvMode:            "Production",
		EnvListen:          "127.0.0.1:0",
		EnvMySQLDSN:        "u:p@tcp(127.0.0.1:3306)/x",
		EnvSecret:          secret,
		EnvAPIKeys:         " acme:" + digestA + " , globex:" + digestB + ",acme:Billing=" + strings.Repeat("0", 64),
		EnvCORSOrigins:     "https://a.example, http://localhost:3000",
		EnvOpenAIBaseURL:   "http://127.0.0.1:9/v1",
		EnvOpenAIModel:     "m",
		EnvOpenAIAPIKeyStd: "sk-std",
		EnvUpstreamURL:     "http://127.0.0.1:9/u",
		// http:// provider URLs in production need this.
		EnvAllowInsecureUpstreams: "true",
	}))
	require.NoError(t, err)
	require.Equal(t, Production, c.Mode)
	require.Equal(t, "127.0.0.1:0", c.Listen)
	require.Equal(t, map[tenancy.ID][]string{"acme": {digestA, "Billing=" + strings.Repeat("0", 64)}, "globex": {digestB}}, c.APIKeys,
		"IDEMGUARD_API_KEYS replaces the file's api_keys")
	require.Equal(t, []string{"https://a.example", "http://localhost:3000"}, c.CORSOrigins)
	require.Equal(t, "http://127.0.0.1:9/v1", c.OpenAI.BaseURL)
	require.Equal(t, "m", c.OpenAI.Model)
	require.Equal(t, "sk-std", c.OpenAI.APIKey, "OPENAI_API_KEY is the fallback")
	require.Equal(t, "http://127.0.0.1:9/u", c.Upstream.URL)

	c, err = Load(path, envOf(map[string]string{EnvMode: "development", EnvOpenAIModel: "m", EnvOpenAIAPIKey: "sk-own", EnvOpenAIAPIKeyStd: "sk-std"}))
	require.NoError(t, err)
	require.Equal(t, "sk-own", c.OpenAI.APIKey, "IDEMGUARD_OPENAI_API_KEY wins")
}

func TestLoadDevelopmentKeepsConfiguredDemoScope(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "scopes: [{name: demo, operation: demo, delay: 1s, key_required: true}]\n")
	c, err := Load(path, envOf(nil))
	require.NoError(t, err)
	require.Equal(t, []Scope{{Name: "demo", Operation: OpDemo, Delay: time.Second, KeyRequired: true}, demoJobScope()}, c.Scopes)
}

func TestLoadProductionNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	_, err := Load("", envOf(map[string]string{EnvMode: "production"}))
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, "mysql_dsn: is required in production mode: set IDEMGUARD_MYSQL_DSN")
	require.Contains(t, msg, "IDEMPOTENCY_SECRET is not set")
	require.Contains(t, msg, "api_keys: production mode needs at least one tenant API key: set IDEMGUARD_API_KEYS")

	_, err = Load("", envOf(map[string]string{EnvMode: "production", EnvMySQLDSN: "u@tcp(h:3306)/d",
		EnvAPIKeys: "acme:" + digestA, EnvSecret: "short"}))
	require.ErrorContains(t, err, "IDEMPOTENCY_SECRET is 5 bytes long")
	require.NotContains(t, err.Error(), "mysql_dsn")
}

func TestLoadRefusesSecretsInTheFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "secret: hunter2hunter2hunter2hunter2hunter2\nopenai: {api_key: sk-live-123}\n")
	_, err := Load(path, envOf(nil))
	require.ErrorContains(t, err, "secret: is never read from the config file; remove it and set the environment variable IDEMPOTENCY_SECRET")
	require.ErrorContains(t, err, "openai.api_key: is never read from the config file")
	require.NotContains(t, err.Error(), "hunter2")
	require.NotContains(t, err.Error(), "sk-live-123")
}

func TestLoadNamesBadSettings(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"unknown setting", "listn: x\n", nil, "listn: unknown setting (line 1); the nearest valid setting here is listen"},
		{"unknown nested setting", "scopes: [{name: a, operation: demo, stale_afer: 1m}]\n", nil,
			"scopes[0].stale_afer: unknown setting (line 1); the nearest valid setting here is scopes[0].stale_after"},
		{"wrong shape", "pool: {max_open_conns: many}\n", nil, "pool.max_open_conns: want a whole number (line 1), got a string"},
		{"not a mapping", "just text\n", nil, "config file: want a mapping of settings (name: value) (line 1), got a string"},
		{"mode", "mode: staging\n", nil, `mode: must be "development" or "production", got "staging"`},
		{"listen", "listen: localhost\n", nil, `listen: must be host:port`},
		{"listen port", "listen: 'a:99999'\n", nil, `listen: port must be a number from 0 to 65535`},
		{"duration without unit", "max_wait: 30\n", nil, `max_wait: "30" is not a duration; write a number with a unit`},
		{"max_wait range", "max_wait: 1h\n", nil, `max_wait: must be between 1s and 5m0s, got 1h0m0s`}, {"max_wait zero", "max_wait: 0s\n", nil, `max_wait: must be between 1s and 5m0s, got 0s`},
		{"body", "max_body_bytes: 0\n", nil, `max_body_bytes: must be between 1 and`},
		{"max_live_streams", "max_live_streams: 0\n", nil, `max_live_streams: must be between 1 and 100000, got 0`},
		{"store_timeout", "store_timeout: 0s\n", nil, `store_timeout: must be between 1ms and 1m0s`},
		{"dsn", "mysql_dsn: 'mysql://u:pw@h/d'\n", nil, `mysql_dsn: mysqlconn: invalid DSN`},
		{"defaults ttl", "defaults: {ttl: 500ms}\n", nil, `defaults.ttl: must be between 1s and 168h0m0s, got 500ms`},
		{"defaults ttl max", "defaults: {ttl: 200h}\n", nil, `defaults.ttl: must be between 1s and 168h0m0s, got 200h0m0s`},
		{"stale_after", "scopes: [{name: a, operation: demo}, {name: b, operation: demo}, {name: c, operation: demo, stale_after: 100ms}]\n",
			nil, `scopes[2].stale_after: must be at least 300ms, got 100ms`},
		{"max_attempts", "scopes: [{name: a, operation: demo, max_attempts: 101}]\n", nil, `scopes[0].max_attempts: must be between 1 and 100`},
		{"stale_policy", "scopes: [{name: a, operation: demo, stale_policy: retry}]\n", nil, `scopes[0].stale_policy: must be "takeover" or "fail", got "retry"`},
		{"progress_stages", "scopes: [{name: a, operation: demo, progress_stages: [reading, 'model output']}]\n", nil, `scopes[0]: ProgressStages: "model output" must be`},
		{"scope name", "scopes: [{name: 'a b', operation: demo}]\n", nil, `scopes[0].name: `},
		{"scope duplicate", "scopes: [{name: a, operation: demo}, {name: a, operation: demo}]\n", nil, `scopes[1].name: scope "a" is already defined by scopes[0]`},
		{"operation missing", "scopes: [{name: a}]\n", nil, `scopes[0].operation: is required`},
		{"operation unknown", "scopes: [{name: a, operation: gpt}]\n", nil, `scopes[0].operation: must be one of openai_chat, anthropic_messages, http_json, demo, got "gpt"`},
		{"delay on non-demo", "upstream: {url: 'http://h/'}\nscopes: [{name: a, operation: http_json, delay: 1s}]\n", nil, `scopes[0].delay: only a demo scope has a delay`},
		{"url on non-http", "scopes: [{name: a, operation: demo, url: 'http://h/'}]\n", nil, `scopes[0].url: only an http_json scope has a url`},
		{"http_json without url", "scopes: [{name: a, operation: http_json}]\n", nil, `scopes[0].url: an http_json scope needs a url`},
		{"scope timeout", "scopes: [{name: a, operation: demo, timeout: -1s}]\n", nil, `scopes[0].timeout: must be between 0s and 1h0m0s`},
		{"openai model", "scopes: [{name: a, operation: openai_chat}]\n", nil, `openai.model: is required by the openai_chat scopes`},
		{"openai url", "openai: {base_url: 'ftp://x', model: m}\nscopes: [{name: a, operation: openai_chat}]\n", nil, `openai.base_url: must be an http:// or https:// URL`},
		{"cors", "cors_origins: ['https://a.example/path']\n", nil, `cors_origins[0]: must be an exact origin like https://app.example.com`},
		{"cors wildcard", "cors_origins: ['*']\n", nil, `cors_origins[0]: must be an exact origin`},
		{"header", "upstream: {headers: {'bad header': x}}\n", nil, `upstream.headers: "bad header" is not a valid HTTP header name`},
		{"api key not hex", "api_keys: {acme: [my-plain-key]}\n", nil, `api_keys.acme[0]: must be the hex SHA-256 digest of an API key`},
		{"api key tenant", "api_keys: {'bad tenant': [" + digestA + "]}\n", nil, `api_keys.bad tenant: tenancy: invalid tenant id`},
		{"api key shared", "api_keys: {a: [" + digestA + "], b: [" + digestA + "]}\n", nil, `the same key digest is also configured for tenant`},
		{"api keys env", "", map[string]string{EnvAPIKeys: "acme"}, `IDEMGUARD_API_KEYS: entry 1 is not tenant:<sha256 hex>`},
		{"api keys env digest", "", map[string]string{EnvAPIKeys: "acme:nothex"}, `IDEMGUARD_API_KEYS.acme[0]: must be the hex SHA-256 digest`},
		{"pool", "pool: {max_open_conns: -1}\n", nil, `pool.max_open_conns: must not be negative`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := ""
			if tc.file != "" {
				path = writeFile(t, tc.file)
			}
			_, err := Load(path, envOf(tc.env))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "max_wait: soon\nscopes: [{name: a, operation: demo, ttl: 1ms}]\n")
	_, err := Load(path, envOf(nil))
	require.ErrorContains(t, err, "config: 2 problem(s)")
	require.ErrorContains(t, err, "max_wait:")
	require.ErrorContains(t, err, "scopes[0].ttl:")
}

func TestLoadNeverEchoesTheDSNPassword(t *testing.T) {
	t.Parallel()
	_, err := Load("", envOf(map[string]string{EnvMySQLDSN: "user:s3cr3tpw@tcp(h:3306/d?x=%zz"}))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cr3tpw")
}

func TestValidateAfterChange(t *testing.T) {
	t.Parallel()
	c, err := Load("", envOf(nil))
	require.NoError(t, err)
	c.Scopes[0].Settings.StaleAfter = time.Millisecond
	require.ErrorContains(t, c.Validate(), "scopes[0].stale_after: must be at least 300ms")
	c.Scopes[0].Settings.StaleAfter = 0
	c.Secret = []byte("short")
	require.ErrorContains(t, c.Validate(), "IDEMPOTENCY_SECRET is 5 bytes long")
}

// TestExampleConfig: the example configuration refuses to start as shipped
// (its API-key digests are placeholders); with the placeholders replaced by
// digests of random keys it loads; replaced by the digests of guessable keys
// (as it once shipped: sha256 of foo and bar, so Bearer foo read tenant
// acme's figures) it is refused at load, naming each entry and never the key.
func TestExampleConfig(t *testing.T) {
	t.Parallel()
	example, err := os.ReadFile(filepath.Join("..", "..", "docs", "idemguard.example.yaml"))
	require.NoError(t, err)
	env := envOf(map[string]string{EnvSecret: secret, EnvMySQLDSN: "idemguard:pw@tcp(db:3306)/idemguard"})

	_, err = Load(writeFile(t, string(example)), env)
	require.ErrorContains(t, err, "config: 2 problem(s)")
	require.ErrorContains(t, err, "api_keys.acme[0]: is a placeholder of the example configuration: generate a random key")
	require.ErrorContains(t, err, "api_keys.globex[0]: is a placeholder")

	replace := func(acme, globex string) string {
		s := strings.Replace(string(example), Placeholder, acme, 1)
		return strings.Replace(s, Placeholder, globex, 1)
	}
	c, err := Load(writeFile(t, replace(digestA, digestB)), env)
	require.NoError(t, err)
	require.Equal(t, Production, c.Mode)
	require.Equal(t, "127.0.0.1:8080", c.Listen, "the example does not listen on every interface")
	require.Len(t, c.APIKeys, 2)
	names := make([]string, 0, len(c.Scopes))
	for _, s := range c.Scopes {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"chat", "actionRequests.aiProposeCopy", "research", "demo"}, names)
	require.Equal(t, MCP{Path: "/mcp"}, c.MCP)
	require.True(t, c.Scopes[2].Async)
	require.Equal(t, []tenancy.ID{"acme"}, c.Scopes[2].Tenants)
	require.Equal(t, Audit{Log: AuditLogOff, Table: true}, c.Audit)
	require.Equal(t, "checkout="+digestA, c.APIKeys["acme"][0])
	require.Equal(t, Limit{Concurrent: 128, Jobs: 64, Rate: 1000, Burst: 2000}, c.Limits.Tenants["acme"])
	require.Equal(t, Limit{Concurrent: 8}, c.Scopes[0].Limits)
	require.False(t, c.AllowInsecureUpstreams)

	foo, bar := auth.HashAPIKey("foo"), auth.HashAPIKey("bar")
	_, err = Load(writeFile(t, replace(foo, bar)), env)
	require.ErrorContains(t, err, "config: 2 problem(s)")
	require.ErrorContains(t, err, "api_keys.acme[0]: is the digest of a known weak key")
	require.ErrorContains(t, err, "api_keys.globex[0]: is the digest of a known weak key")
	require.NotContains(t, err.Error(), `"foo"`)

	_, err = Load(writeFile(t, replace(auth.HashAPIKey(DemoAPIKey), digestB)), env)
	require.ErrorContains(t, err, "api_keys.acme[0]: is the digest of the public development demo key")
}

// TestLoadRefusesWeakDigests: production refuses the digests of the usual
// guesses, from the file and the environment; development accepts them
// (local tests) but never the demo key's digest for a configured tenant.
func TestLoadRefusesWeakDigests(t *testing.T) {
	t.Parallel()
	prod := map[string]string{EnvMode: "production", EnvSecret: secret, EnvMySQLDSN: "u@tcp(h:3306)/d"}
	for _, k := range []string{"", "foo", "bar", "test", "password", "secret", "changeme", "admin", "demo", "key", "apikey", "123456", "letmein"} {
		prod[EnvAPIKeys] = "acme:ci=" + strings.ToUpper(auth.HashAPIKey(k))
		_, err := Load("", envOf(prod))
		require.ErrorContains(t, err, "IDEMGUARD_API_KEYS.acme[0]: is the digest of a known weak key", k)
	}
	dev := map[string]string{EnvMode: "development", EnvAPIKeys: "acme:" + auth.HashAPIKey("foo")}
	_, err := Load("", envOf(dev))
	require.NoError(t, err)
	dev[EnvAPIKeys] = "demo:" + auth.HashAPIKey(DemoAPIKey)
	_, err = Load("", envOf(dev))
	require.ErrorContains(t, err, "is the digest of the public development demo key")
}

// TestLoadAudit: audit.log and audit.table from the file, the environment
// over the file; a bad switch or key name is reported by its setting.
func TestLoadAudit(t *testing.T) {
	t.Parallel()
	c, err := Load("", envOf(nil))
	require.NoError(t, err)
	require.Equal(t, Audit{Log: AuditLogOff, Table: true}, c.Audit, "the defaults")

	path := writeFile(t, "audit: {log: /var/log/idemguard/audit.jsonl, table: false}\n")
	c, err = Load(path, envOf(nil))
	require.NoError(t, err)
	require.Equal(t, Audit{Log: "/var/log/idemguard/audit.jsonl", Table: false}, c.Audit)

	c, err = Load(path, envOf(map[string]string{EnvAuditLog: "stdout", EnvAuditTable: "true"}))
	require.NoError(t, err)
	require.Equal(t, Audit{Log: AuditLogStdout, Table: true}, c.Audit)

	_, err = Load(path, envOf(map[string]string{EnvAuditTable: "sometimes"}))
	require.ErrorContains(t, err, EnvAuditTable+": must be true or false")

	_, err = Load("", envOf(map[string]string{EnvAPIKeys: "acme:bad name=" + strings.Repeat("0", 64)}))
	require.ErrorContains(t, err, "key name")
	require.NotContains(t, err.Error(), strings.Repeat("0", 64), "the digest is not echoed")
}

// An unknown key is one problem among the others, never the end of validation, and never names a
// Go type.
func TestLoadReportsUnknownSettingsWithTheOthers(t *testing.T) {
	t.Parallel()
	path := writeFile(t, "mode: production\nlisten: localhost\npool:\n  max_idle_connz: 3\nshutdown_grase: 7d\nmax_wait: [1]\n")
	_, err := Load(path, envOf(nil))
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		"pool.max_idle_connz: unknown setting (line 4); the nearest valid setting here is pool.max_idle_conns",
		"shutdown_grase: unknown setting (line 5); the nearest valid setting here is shutdown_grace",
		"max_wait: want a single value (line 6), got a list",
		"listen: must be host:port",
		"mysql_dsn: is required in production mode",
		"api_keys: production mode needs at least one tenant API key",
	} {
		require.Contains(t, msg, want)
	}
	require.NotContains(t, msg, "rawConfig")
	require.NotContains(t, msg, "config.raw")
}

func TestNearestSetting(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, editDistance("ttl", "ttl"))
	require.Equal(t, 1, editDistance("tll", "ttl"))
	require.Equal(t, 1, editDistance("stale_afer", "stale_after"))
	require.Equal(t, 3, editDistance("", "abc"))
	require.Equal(t, "stale_after", nearest("stale_afer", []string{"max_attempts", "stale_after", "stale_policy", "ttl"}))
	require.Equal(t, "listen", nearest("LISTEN", []string{"listen", "mode"}))
}

// YAML anchors and merge keys are settings like any other: a merged mapping is checked where it
// lands, and "<<" itself is no unknown setting.
func TestLoadChecksMergedSettings(t *testing.T) {
	t.Parallel()
	base := "x-slow: &slow {operation: demo, delay: 10ms, stale_after: 1m}\n"
	_, err := Load(writeFile(t, base+"scopes: [{<<: *slow, name: a}]\n"), envOf(nil))
	require.ErrorContains(t, err, "x-slow: unknown setting (line 1)", "a top-level anchor holder is still an unknown key")

	c, err := Load(writeFile(t, "defaults: &d {ttl: 1h}\nscopes: [{<<: *d, name: a, operation: demo}]\n"), envOf(nil))
	require.NoError(t, err)
	require.Equal(t, time.Hour, c.Scopes[0].Settings.TTL)

	_, err = Load(writeFile(t, "defaults: &d {ttl: 1h}\nscopes: [{<<: [*d], name: a, operation: demo, tll: 1h}]\n"), envOf(nil))
	require.ErrorContains(t, err, "scopes[0].tll: unknown setting")
	require.NotContains(t, err.Error(), "<<")
}

// TestModeMissingWithProductionSettingsRefuses: a configuration with a
// database, API keys, JWT settings or non-demo scopes and no mode refuses to
// load and says to set the mode; it never falls back to development mode
// (public demo key, automatic migrations).
func TestModeMissingWithProductionSettingsRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		names      string
	}{
		{"production file without its mode line", "mysql_dsn: u:p@tcp(db:3306)/x\napi_keys: {acme: [" + digestA + "]}\n" +
			"openai: {model: m}\nscopes: [{name: chat, operation: openai_chat}]\n", nil,
			"mysql_dsn, api_keys, scopes with operations other than demo"},
		{"dsn from the environment", "", map[string]string{EnvMySQLDSN: "u:p@tcp(db:3306)/x"}, "mysql_dsn"},
		{"api keys from the environment", "", map[string]string{EnvAPIKeys: "acme:" + digestA}, "api_keys"},
		{"jwt", "jwt: {jwks_url: 'https://idp.example/jwks', issuer: i, audience: a}\n", nil, "jwt"},
		{"a real scope", "upstream: {url: 'https://x.example/'}\nscopes: [{name: copy, operation: http_json}]\n", nil,
			"scopes with operations other than demo"},
		{"a scope named demo that is not the demo", "openai: {model: m}\nscopes: [{name: demo, operation: openai_chat}]\n", nil,
			"scopes with operations other than demo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := ""
			if tc.file != "" {
				path = writeFile(t, tc.file)
			}
			env := map[string]string{EnvSecret: secret}
			for k, v := range tc.env {
				env[k] = v
			}
			c, err := Load(path, envOf(env))
			require.Nil(t, c, "never a development configuration")
			require.ErrorContains(t, err, "mode: is not set, but the configuration has production settings ("+tc.names+"): set mode: production")

			// Asking explicitly works either way.
			env[EnvMode] = "development"
			c, err = Load(path, envOf(env))
			require.NoError(t, err)
			require.Equal(t, Development, c.Mode)
		})
	}

	// Nothing production-like: development by default, demo scopes included.
	path := writeFile(t, "listen: 127.0.0.1:9000\nscopes: [{name: slow, operation: demo, delay: 1s}]\n")
	c, err := Load(path, envOf(nil))
	require.NoError(t, err)
	require.Equal(t, Development, c.Mode)
}

// TestLoadAuthFailures: the failed-authentication limit's defaults, the
// file's values, and its bounds named by setting.
func TestLoadAuthFailures(t *testing.T) {
	t.Parallel()
	c, err := Load("", envOf(nil))
	require.NoError(t, err)
	require.Equal(t, AuthFailures{Max: 20, Window: time.Minute, MaxClients: 10_000}, c.AuthFailures)
	c, err = Load(writeFile(t, "auth_failures: {max: -1, window: 10m, max_clients: 5}\n"), envOf(nil))
	require.NoError(t, err)
	require.Equal(t, AuthFailures{Max: -1, Window: 10 * time.Minute, MaxClients: 5}, c.AuthFailures)
	_, err = Load(writeFile(t, "auth_failures: {max: 0, window: 10ms, max_clients: 0}\n"), envOf(nil))
	require.ErrorContains(t, err, "auth_failures.max: must be between 1 and 10000, or -1 (no limit), got 0")
	require.ErrorContains(t, err, "auth_failures.window: must be between 1s and 24h0m0s, got 10ms")
	require.ErrorContains(t, err, "auth_failures.max_clients: must be between 1 and 1000000, got 0")
}
