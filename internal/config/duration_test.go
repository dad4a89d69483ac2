package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"7d": 7 * Day, "1d12h": 36 * time.Hour, "1.5d": 36 * time.Hour, "0d": 0, " 2d ": 2 * Day,
		"1d30m": Day + 30*time.Minute, "-1d": -Day, "24h": Day, "300ms": 300 * time.Millisecond, "1h30m": 90 * time.Minute,
	} {
		got, err := ParseDuration(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "d", "7", "7dd", "1d-2h", "12h1d", "xd", "1e3d", "1d 2h", "7days", "200000d", "0x1d"} {
		_, err := ParseDuration(in)
		require.Error(t, err, in)
	}
}

// The config file and stats --since share the parser: ttl: 7d is the longest TTL.
func TestLoadAcceptsDays(t *testing.T) {
	t.Parallel()
	c, err := Load(writeFile(t, "defaults: {ttl: 7d}\nscopes: [{name: a, operation: demo, ttl: 1d12h}]\n"), envOf(nil))
	require.NoError(t, err)
	require.Equal(t, 7*Day, c.Defaults.TTL)
	require.Equal(t, 36*time.Hour, c.Scopes[0].Settings.TTL)

	_, err = Load(writeFile(t, "defaults: {ttl: 8d}\n"), envOf(nil))
	require.ErrorContains(t, err, "defaults.ttl: must be between 1s and 168h0m0s, got 192h0m0s")
	_, err = Load(writeFile(t, "defaults: {ttl: 7days}\n"), envOf(nil))
	require.ErrorContains(t, err, `defaults.ttl: "7days" is not a duration; write a number with a unit, e.g. 300ms, 30s, 5m, 24h, 7d`)
}
