package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func productionEnv(extra map[string]string) func(string) string {
	m := map[string]string{EnvMode: "production", EnvMySQLDSN: "u@tcp(h:3306)/d", EnvSecret: secret, EnvAPIKeys: "acme:" + digestA}
	for k, v := range extra {
		m[k] = v
	}
	return envOf(m)
}

// Production refuses provider URLs that are not https (the provider's key
// or the upstream's token would travel in clear text) unless
// allow_insecure_upstreams says so; development accepts them. Before this
// check the production config below loaded.
func TestProductionProviderURLsAreHTTPS(t *testing.T) {
	t.Parallel()
	yaml := "openai: {base_url: 'http://llm.internal/v1', model: m}\nupstream: {url: 'http://up.internal/op'}\n" +
		"scopes:\n  - {name: chat, operation: openai_chat}\n  - {name: j, operation: http_json}\n  - {name: k, operation: http_json, url: 'http://other.internal/x'}\n"
	_, err := Load(writeFile(t, yaml), productionEnv(nil))
	require.Error(t, err)
	for _, setting := range []string{"openai.base_url", "upstream.url", "scopes[2].url"} {
		require.ErrorContains(t, err, setting+": must be an https:// URL in production")
	}
	require.ErrorContains(t, err, "allow_insecure_upstreams: true (or "+EnvAllowInsecureUpstreams+"=true)")

	c, err := Load(writeFile(t, yaml+"allow_insecure_upstreams: true\n"), productionEnv(nil))
	require.NoError(t, err)
	require.True(t, c.AllowInsecureUpstreams)
	_, err = Load(writeFile(t, yaml), productionEnv(map[string]string{EnvAllowInsecureUpstreams: "true"}))
	require.NoError(t, err)
	_, err = Load(writeFile(t, yaml), productionEnv(map[string]string{EnvAllowInsecureUpstreams: "yes please"}))
	require.ErrorContains(t, err, EnvAllowInsecureUpstreams+": must be true or false")

	https := "openai: {base_url: 'https://llm.example/v1', model: m}\nupstream: {url: 'https://up.example/op'}\n" +
		"scopes:\n  - {name: chat, operation: openai_chat}\n  - {name: j, operation: http_json}\n"
	_, err = Load(writeFile(t, https), productionEnv(nil))
	require.NoError(t, err)
	_, err = Load(writeFile(t, "mode: development\n"+yaml), envOf(nil))
	require.NoError(t, err, "development mode accepts http")
}

func TestLimitsDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	c, err := Load(writeFile(t, "listen: 127.0.0.1:0\n"), envOf(nil))
	require.NoError(t, err)
	require.Equal(t, Limits{Tenant: Limit{Concurrent: DefaultLimitConcurrent, Jobs: DefaultLimitJobs,
		Rate: DefaultLimitRate, Burst: DefaultLimitBurst}}, c.Limits)

	c, err = Load(writeFile(t, "limits: {off: true, concurrent: -1, rate: -1}\n"), envOf(nil))
	require.NoError(t, err)
	require.True(t, c.Limits.Off)
	require.Equal(t, -1, c.Limits.Tenant.Concurrent)

	_, err = Load(writeFile(t, "limits: {concurrent: 0, jobs: -2, rate: 0, burst: -1, tenants: {'bad tenant': {}}}\n"+
		"scopes: [{name: s, operation: demo, limits: {concurrent: 200000}}]\n"), envOf(nil))
	require.Error(t, err)
	for _, want := range []string{
		"limits.concurrent: must be between 1 and 100000, or -1 (no limit), got 0",
		"limits.jobs: must be between 1 and 100000, or -1 (no limit), got -2",
		"limits.rate: must be requests per second above 0",
		"limits.burst: must be between 1 and 100000, got -1",
		"limits.tenants.bad tenant: is not a valid tenant id",
		"scopes[0].limits.concurrent: must be between 1 and 100000",
	} {
		require.ErrorContains(t, err, want)
	}
	_, err = Load(writeFile(t, "limits: {concurrent: 5, tenants: {acme: {concurrent: 100}}, tenantz: {}}\n"), envOf(nil))
	require.ErrorContains(t, err, "tenantz")
}

func TestReplayCacheBytes(t *testing.T) {
	t.Parallel()
	c, err := Load(writeFile(t, "listen: 127.0.0.1:0\n"), envOf(nil))
	require.NoError(t, err)
	require.EqualValues(t, 64<<20, c.ReplayCacheBytes)
	require.EqualValues(t, 32<<20, c.ReplayCacheTenantBytes)
	c, err = Load(writeFile(t, "replay_cache_bytes: 8388608\n"), envOf(nil))
	require.NoError(t, err)
	require.EqualValues(t, 4<<20, c.ReplayCacheTenantBytes, "half of replay_cache_bytes")
	_, err = Load(writeFile(t, "replay_cache_bytes: 1000\nreplay_cache_tenant_bytes: 1\n"), envOf(nil))
	require.ErrorContains(t, err, "replay_cache_bytes: must be between 1 MiB")
	require.ErrorContains(t, err, "replay_cache_tenant_bytes: must be between 64 KiB")
}
