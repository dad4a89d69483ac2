package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/internal/stats/statstest"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/store"
)

// lenient thresholds that the seeded figures (takeover 7%, hit 22.5%, failure 12%) all meet.
var lenient = []string{"--max-takeover-rate", "10%", "--min-hit-rate", "0.20", "--max-failure-rate", "20%"}

func seededStatsDB(t *testing.T) map[string]string {
	t.Helper()
	d := testdb.New(t)
	_, err := statstest.Seed(t.Context(), d.DB)
	require.NoError(t, err)
	return map[string]string{EnvMySQLDSN: d.DSN}
}

// The figures of a seeded table, every threshold breached with the defaults, exit 1
// (exitBreach). The 27 keys retried after a failure are not takeovers.
func TestStatsTableAndBreaches(t *testing.T) {
	t.Parallel()
	environ := seededStatsDB(t)

	r := runCLI(t, environ, "stats")
	require.Equal(t, exitBreach, r.code, r.stderr)
	require.Contains(t, r.stderr, "idemguard stats: threshold breached: stale takeover rate 7.0% > 5.0%; "+
		"cache hit rate 22.5% < 30.0%; failure rate 12.0% > 10.0%\n")
	for _, line := range []string{
		`(?m)^total keys\s+100\s+-\s+-\s+keys created in the window$`,
		`(?m)^cache hit rate\s+22\.5%\s+>= 30\.0%\s+BREACH\s+45 replays / 200 requests$`,
		`(?m)^stale takeover rate\s+7\.0%\s+<= 5\.0%\s+BREACH\s+7 takeovers / 100 executions \(27 retries not counted\)$`,
		`(?m)^failure rate\s+12\.0%\s+<= 10\.0%\s+BREACH\s+12 of 100 keys failed$`,
		`(?m)^average TTL\s+20h0m0s\s+`,
		`(?m)^idemguard stats: last 24h0m0s, `,
		`requests 200, claims 66, retries 27, takeovers 7, replays 45,`,
	} {
		require.Regexp(t, regexp.MustCompile(line), r.stdout)
	}

	r = runCLI(t, environ, append([]string{"stats"}, lenient...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NotContains(t, r.stdout, "BREACH")
	require.Empty(t, r.stderr)
}

// Each threshold, tightened alone by its flag, breaches alone and exits 1.
func TestStatsEachThreshold(t *testing.T) {
	t.Parallel()
	environ := seededStatsDB(t)
	for _, tt := range []struct {
		flag, value, want string
	}{
		{"--max-takeover-rate", "5%", "stale takeover rate 7.0% > 5.0%"},
		{"--min-hit-rate", "30%", "cache hit rate 22.5% < 30.0%"},
		{"--max-failure-rate", "0.1", "failure rate 12.0% > 10.0%"},
	} {
		t.Run(tt.flag, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"stats"}, lenient...)
			args = append(args, tt.flag, tt.value) // the last value of a flag wins
			r := runCLI(t, environ, args...)
			require.Equal(t, exitBreach, r.code, r.stderr)
			require.Equal(t, "idemguard stats: threshold breached: "+tt.want+"\n", r.stderr)
			require.Equal(t, 1, strings.Count(r.stdout, "BREACH"))
		})
	}
}

func TestStatsJSON(t *testing.T) {
	t.Parallel()
	environ := seededStatsDB(t)

	r := runCLI(t, environ, append([]string{"stats", "--json", "--since", "0.5d12h"}, lenient...)...)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, 1, strings.Count(r.stdout, "\n"), "one JSON object on one line")
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	for k, want := range map[string]any{
		"since": "24h0m0s", "since_seconds": 86400.0, "total_keys": 100.0, "executions": 100.0, "failed_keys": 12.0,
		"average_ttl_seconds": 72000.0, "cache_hit_rate": 0.225, "stale_takeover_rate": 0.07, "failure_rate": 0.12,
		"ok": true, "breaches": []any{},
		"thresholds": map[string]any{"max_stale_takeover_rate": 0.1, "min_cache_hit_rate": 0.2, "max_failure_rate": 0.2},
	} {
		require.Equal(t, want, got[k], k)
	}
	counts := got["counts"].(map[string]any)
	require.Equal(t, 200.0, counts["requests"])
	require.Equal(t, 45.0, counts["replays"])
	for _, k := range []string{"now", "window_start", "buckets_from"} {
		require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$`, got[k], k)
	}

	r = runCLI(t, environ, "stats", "--json")
	require.Equal(t, exitBreach, r.code)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	require.Equal(t, false, got["ok"])
	require.Len(t, got["breaches"], 3)
	require.Equal(t, map[string]any{"figure": "failure_rate", "value": 0.12, "threshold": 0.1, "op": ">"}, got["breaches"].([]any)[2])
	require.Contains(t, r.stderr, "threshold breached")
}

// An idle service (no keys, no requests) reports "no data", which breaches nothing.
func TestStatsNoData(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	environ := map[string]string{EnvMySQLDSN: d.DSN}

	r := runCLI(t, environ, "stats")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `(?m)^cache hit rate\s+-\s+>= 30\.0%\s+no data\s+0 replays / 0 requests$`, r.stdout)
	require.Regexp(t, `(?m)^failure rate\s+-\s+<= 10\.0%\s+no data\s+`, r.stdout)

	r = runCLI(t, environ, "stats", "--json", "--min-hit-rate", "100%")
	require.Equal(t, exitOK, r.code, r.stderr)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &got))
	for _, k := range []string{"cache_hit_rate", "stale_takeover_rate", "failure_rate", "average_ttl_seconds"} {
		v, ok := got[k]
		require.True(t, ok, k)
		require.Nil(t, v, k)
	}
	require.Equal(t, true, got["ok"])
}

func TestStatsUsageErrors(t *testing.T) {
	t.Parallel()
	dsn := []string{"--dsn", "u@tcp(127.0.0.1:1)/db"}
	requireUsageErrors(t, "stats", []usageCase{
		{"missing DSN", nil, "pass --dsn or set IDEMGUARD_MYSQL_DSN"},
		{"zero since", append([]string{"--since", "0s"}, dsn...), `invalid value "0s" for flag -since: must be between 1s and 9600h0m0s`},
		{"negative since", append([]string{"--since", "-1h"}, dsn...), `invalid value "-1h" for flag -since`},
		{"since not a duration", append([]string{"--since", "yesterday"}, dsn...), `invalid value "yesterday" for flag -since: want a duration (90m, 24h) or days (7d, 1d12h)`},
		{"days after hours", append([]string{"--since", "12h1d"}, dsn...), `invalid value "12h1d" for flag -since`},
		{"too long", append([]string{"--since", "401d"}, dsn...), `invalid value "401d" for flag -since: must be between 1s and 9600h0m0s`},
		{"zero days", append([]string{"--since", "0d"}, dsn...), `invalid value "0d" for flag -since: must be between`},
		{"rate over 100%", append([]string{"--max-takeover-rate", "150%"}, dsn...), `invalid value "150%" for flag -max-takeover-rate: must be between 0 and 1`},
		{"negative rate", append([]string{"--max-failure-rate", "-0.1"}, dsn...), `invalid value "-0.1" for flag -max-failure-rate`},
		{"rate not a number", append([]string{"--min-hit-rate", "high"}, dsn...), `invalid value "high" for flag -min-hit-rate: want a fraction (0.05) or a percentage (5%)`},
		{"unknown flag", append([]string{"--bogus"}, dsn...), "flag provided but not defined: -bogus"},
		{"positional", append(dsn, "24h"), `unexpected argument "24h"`},
		{"malformed DSN", []string{"--dsn", "app:hunter2@tcp(db:3306"}, `idemguard stats: mysqlconn: invalid DSN "app:xxxxx@tcp(db:3306"`},
		{"URL DSN", []string{"--dsn", "mysql://app:hunter2@db/idemguard"}, "not a URL"},
	})
}

// Figures that cannot be read exit 3 (exitUnreadable), never 1: alerting tells a breach from a
// check that could not look.
func TestStatsDatabaseErrors(t *testing.T) {
	t.Parallel()
	r := runCLI(t, map[string]string{EnvMySQLDSN: "app:hunter2@tcp(127.0.0.1:1)/idemguard?timeout=1s"}, "stats")
	require.Equal(t, exitUnreadable, r.code, r.stderr)
	require.Equal(t, 3, exitUnreadable, "documented in stats' usage, README and docs/OPERATIONS.md")
	require.Contains(t, r.stderr, `"msg":"stats: connect to database"`)
	require.Contains(t, r.stderr, "app:xxxxx@tcp(127.0.0.1:1)/idemguard")
	require.NotContains(t, r.stderr, "hunter2")
	require.Empty(t, r.stdout)

	d := testdb.New(t)
	_, err := d.DB.ExecContext(t.Context(), `DROP TABLE idempotency_stats`)
	require.NoError(t, err)
	r = runCLI(t, map[string]string{EnvMySQLDSN: d.DSN}, "stats")
	require.Equal(t, exitUnreadable, r.code, r.stderr)
	require.Contains(t, r.stderr, "idemguard migrate up")
	require.Empty(t, r.stdout)
}

// stats secrets counts the live rows per secret id: expired rows do not count, a started row
// does even past its expiry (its owner may still hold its lease), NULL is the unnamed secret.
func TestStatsSecrets(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	st := mysqlstore.New(d.DB)
	ctx := t.Context()
	n := 0
	claim := func(secretID string, ttl time.Duration) uint64 {
		n++
		id, err := st.Claim(ctx, store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: fmt.Sprintf("%064d", n),
			Fingerprint: fmt.Sprintf("%064d", 0), SecretID: secretID, Nonce: fmt.Sprintf("n%d", n), TTL: ttl, Lease: time.Minute})
		require.NoError(t, err)
		return id
	}
	complete := func(id uint64, ttl time.Duration) {
		ok, _, err := st.Complete(ctx, store.CompleteParams{ID: id, Nonce: fmt.Sprintf("n%d", id), Status: store.RowSucceeded,
			Response: []byte(`{"ok":true}`), ResponseCode: 200, TTL: ttl})
		require.NoError(t, err)
		require.True(t, ok)
	}
	for range 3 {
		complete(claim("2026-05", time.Hour), time.Hour)
	}
	complete(claim("2026-05", time.Hour), -time.Hour) // expired: not counted
	claim("2026-11", time.Hour)                       // started
	claim("2026-11", -time.Hour)                      // started past its expiry: still counted
	complete(claim("", time.Hour), time.Hour)

	environ := map[string]string{EnvMySQLDSN: d.DSN}
	r := runCLI(t, environ, "stats", "secrets")
	require.Equal(t, exitOK, r.code, r.stderr)
	for _, line := range []string{
		`(?m)^SECRET ID\s+LIVE ROWS\s+STARTED\s+LAST EXPIRES$`,
		`(?m)^\(unnamed\)\s+1\s+0\s+\d{4}-`,
		`(?m)^2026-05\s+3\s+0\s+\d{4}-`,
		`(?m)^2026-11\s+2\s+2\s+\d{4}-`,
	} {
		require.Regexp(t, regexp.MustCompile(line), r.stdout)
	}

	r = runCLI(t, environ, "stats", "secrets", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var out struct {
		Secrets []struct {
			ID      string `json:"secret_id"`
			Live    int    `json:"live_rows"`
			Started int    `json:"started_rows"`
		} `json:"secrets"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	require.Len(t, out.Secrets, 3)
	require.Equal(t, "", out.Secrets[0].ID)
	require.Equal(t, 3, out.Secrets[1].Live)
	require.Equal(t, 2, out.Secrets[2].Started)

	r = runCLI(t, environ, "stats", "secrets", "extra")
	require.Equal(t, exitUsage, r.code)
}
