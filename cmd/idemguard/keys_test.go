package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/config"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/mysql"
)

// Through the binary's entry point: the dry run says the key would be reset and changes
// nothing; the reset prints one line with the attempt it ended, and the key is absent after
// it; each refusal exits 1 and says why.
func TestKeysResetCommand(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	secret := strings.Repeat("s", 32)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "idemguard.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("scopes:\n  - {name: chat, operation: demo, allow_reset: true}\n  - {name: fixed, operation: demo}\n"), 0o600))
	environ := map[string]string{EnvMySQLDSN: d.DSN, config.EnvSecret: secret, "IDEMGUARD_MODE": "production",
		"IDEMGUARD_API_KEYS": "acme:" + strings.Repeat("a", 64)}

	g, err := idemguard.New(idemguard.Config{Store: mysql.NewStore(d.DB.DB), Secret: []byte(secret)})
	require.NoError(t, err)
	defer func() { _ = g.Close(context.Background()) }()
	op := func(context.Context) (any, error) { return map[string]any{"ok": true}, nil }
	for _, scope := range []string{"chat", "fixed"} {
		_, err := g.Do(t.Context(), idemguard.Call{Tenant: "acme", Scope: scope, ClientKey: "k1", Inputs: 1,
			Settings: idemguard.Settings{AllowReset: scope == "chat"}}, op)
		require.NoError(t, err)
	}
	reset := func(args ...string) (result, keysResetSummary) {
		r := runCLI(t, environ, append([]string{"keys", "reset", "--config", cfgPath, "--tenant", "acme"}, args...)...)
		var s keysResetSummary
		if r.stdout != "" {
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
		}
		return r, s
	}
	r, s := reset("--scope", "chat", "--key", "k1", "--dry-run")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, keysResetSummary{WouldReset: 1, Attempt: 1, Status: "succeeded", DryRun: true}, s)
	r, s = reset("--scope", "fixed", "--key", "k1")
	require.Equal(t, exitError, r.code, r.stderr)
	require.Equal(t, "forbidden", s.Refused)

	r, s = reset("--scope", "chat", "--key", "k1", "--actor", "ops:alice")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, keysResetSummary{Reset: 1, WouldReset: 1, Attempt: 1, Status: "succeeded"}, s)
	key, err := g.Key("acme", "chat", "k1")
	require.NoError(t, err)
	_, err = g.Lookup(t.Context(), key)
	require.ErrorIs(t, err, idemguard.ErrNotFound)
	r, s = reset("--scope", "chat", "--key-hash", key.Hash())
	require.Equal(t, exitError, r.code, r.stderr)
	require.Equal(t, "not_found", s.Refused)

	r, _ = reset("--scope", "chat")
	require.Equal(t, exitUsage, r.code, "neither --key nor --key-hash")
}
