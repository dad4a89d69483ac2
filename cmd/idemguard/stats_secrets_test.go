package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/idemguard/idemguard/store"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/internal/testdb"
)

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
