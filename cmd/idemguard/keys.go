package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/config"
	"github.com/idemguard/idemguard/mysql"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/tenancy"
)

const keysResetUsage = `usage: idemguard keys reset --tenant T --scope S (--key K | --key-hash H) [flags]

Resets a finished key's stored answer, as DELETE /v1/ops/{scope}/keys/{key} does: the next
request with the key runs the operation afresh (attempt 1), and no replica replays the old
answer once this command has printed its line (it waits about a second for their replay
caches). Run it with serve's config file and environment. The scope must allow it
(allow_reset: true in the config file, or in its defaults). A running key is refused (cancel
it first). The audit trail records a reset event with the actor (--actor) and the attempt it
ended.

The key is the client key (--key, the Idempotency-Key that was sent; its hash is made with
IDEMPOTENCY_SECRET) or the key hash (--key-hash, 64 hex digits: the Idempotency-Key-Ref of a
derived key without its "~"). --dry-run changes nothing and says whether the key would be
reset.

Prints one JSON line to stdout:
  {"reset":1,"would_reset":1,"attempt":2,"status":"succeeded","dry_run":false}
reset counts the keys reset (0 or 1), would_reset those a reset would change. Exit status: 0
reset (or, with --dry-run, would be), 1 refused (absent, expired or another tenant's key;
running; a scope that does not allow resets) or a database error, 2 bad flags or config.

flags:
`

// keysResetSummary is the JSON line `idemguard keys reset` prints.
type keysResetSummary struct {
	Reset      int    `json:"reset"`
	WouldReset int    `json:"would_reset"`
	Attempt    int    `json:"attempt,omitempty"`
	Status     string `json:"status,omitempty"`
	Refused    string `json:"refused,omitempty"`
	DryRun     bool   `json:"dry_run"`
}

// runKeys implements `idemguard keys` (its one verb: reset).
func runKeys(ctx context.Context, e env, args []string) int {
	if len(args) == 0 || args[0] != "reset" {
		fmt.Fprint(e.stderr, keysResetUsage)
		return exitUsage
	}
	return runKeysReset(ctx, e, args[1:])
}

// keysResetFlags are the flags of `idemguard keys reset`.
type keysResetFlags struct {
	dsn, configPath, tenant, scope, key, keyHash, actor *string
	dryRun                                              *bool
}

// runKeysReset implements `idemguard keys reset`.
func runKeysReset(ctx context.Context, e env, args []string) int {
	fs := newFlagSet(e, "keys reset", keysResetUsage)
	f := keysResetFlags{
		dsn:        fs.String("dsn", "", "MySQL DSN, user:password@tcp(host:3306)/dbname (default $"+EnvMySQLDSN+")"),
		configPath: fs.String("config", "", "YAML config file, for the scope's allow_reset (default $"+config.EnvConfig+")"),
		tenant:     fs.String("tenant", "", "the key's tenant (required)"),
		scope:      fs.String("scope", "", "the key's scope (required)"),
		key:        fs.String("key", "", "the client key (Idempotency-Key)"),
		keyHash:    fs.String("key-hash", "", "the key hash, 64 hex digits (instead of --key)"),
		actor:      fs.String("actor", "cli", "who resets, for the audit trail"),
		dryRun:     fs.Bool("dry-run", false, "change nothing; say whether the key would be reset"),
	}
	if code, ok := parseFlagsOnly(e, fs, args); !ok {
		return code
	}
	cfg, settings, err := keysResetConfig(e, f)
	if err != nil {
		fmt.Fprintf(e.stderr, "idemguard keys reset: %v\n", err)
		return exitUsage
	}
	db, log, code := openDB(ctx, e, "keys reset", *f.dsn, 2, exitError)
	if db == nil {
		return code
	}
	defer db.Close()
	g, err := idemguard.New(idemguard.Config{Store: mysql.NewStore(db.DB), Secret: cfg.Secret, SecretID: cfg.SecretID,
		PreviousSecrets: cfg.PreviousSecrets, Defaults: cfg.Defaults, StoreTimeout: cfg.StoreTimeout,
		Logger: log, Audit: idemguard.AuditConfig{Store: cfg.Audit.Table}})
	if err != nil {
		fmt.Fprintf(e.stderr, "idemguard keys reset: %v\n", err)
		return exitUsage
	}
	defer func() { _ = g.Close(context.WithoutCancel(ctx)) }()
	key, err := keyOf(g, f)
	if err != nil {
		fmt.Fprintf(e.stderr, "idemguard keys reset: %v\n", err)
		return exitUsage
	}
	sum, err := resetOrDryRun(idemguard.WithActor(ctx, *f.actor), g, key, settings, *f.dryRun)
	return reportReset(ctx, e.stdout, log, sum, err)
}

// keysResetConfig loads the config for the secret and the scope's settings, and checks the
// flags that name the key.
func keysResetConfig(e env, f keysResetFlags) (*config.Config, idemguard.Settings, error) {
	switch {
	case *f.tenant == "" || *f.scope == "":
		return nil, idemguard.Settings{}, errors.New("--tenant and --scope are required")
	case (*f.key == "") == (*f.keyHash == ""):
		return nil, idemguard.Settings{}, errors.New("give one of --key and --key-hash")
	}
	cfg, err := config.Load(*f.configPath, e.getenv)
	if err != nil {
		return nil, idemguard.Settings{}, err
	}
	if cfg.SecretGenerated {
		return nil, idemguard.Settings{}, fmt.Errorf("$%s is required: the key hashes are made with the service's secret", config.EnvSecret)
	}
	for _, s := range cfg.Scopes {
		if s.Name == *f.scope {
			settings := s.Settings
			settings.AllowReset = settings.AllowReset || cfg.Defaults.AllowReset
			return cfg, settings, nil
		}
	}
	return nil, idemguard.Settings{}, fmt.Errorf("scope %q is not in the config", *f.scope)
}

// keyOf is the key the flags name.
func keyOf(g *idemguard.Guard, f keysResetFlags) (idemguard.Key, error) {
	if *f.keyHash != "" {
		return g.KeyOfHash(tenancy.ID(*f.tenant), *f.scope, *f.keyHash)
	}
	return g.Key(tenancy.ID(*f.tenant), *f.scope, *f.key)
}

// resetOrDryRun resets key, or with dryRun says whether it would: a finished key of a scope
// that allows resets.
func resetOrDryRun(ctx context.Context, g *idemguard.Guard, key idemguard.Key, s idemguard.Settings, dryRun bool) (keysResetSummary, error) {
	sum := keysResetSummary{DryRun: dryRun}
	if !dryRun {
		info, err := g.Reset(ctx, key, s)
		if err != nil {
			return sum, err
		}
		sum.Reset, sum.WouldReset, sum.Attempt, sum.Status = 1, 1, info.Attempts, string(info.Status)
		return sum, nil
	}
	info, err := g.Lookup(ctx, key)
	switch {
	case err != nil:
		return sum, err
	case !s.AllowReset:
		return sum, store.ErrResetForbidden
	case info.Status == store.RowStarted:
		return sum, store.ErrKeyRunning
	}
	sum.WouldReset, sum.Attempt, sum.Status = 1, info.Attempts, string(info.Status)
	return sum, nil
}

// reportReset prints the summary line (with why a refused reset was refused) and returns the
// exit code.
func reportReset(ctx context.Context, w io.Writer, log *slog.Logger, sum keysResetSummary, err error) int {
	code := exitOK
	switch {
	case errors.Is(err, idemguard.ErrNotFound):
		sum.Refused, code = "not_found", exitError
	case errors.Is(err, store.ErrKeyRunning):
		sum.Refused, code = "running", exitError
	case errors.Is(err, store.ErrResetForbidden):
		sum.Refused, code = "forbidden", exitError
	case err != nil:
		log.ErrorContext(ctx, "keys reset: the store failed", "err", err)
		return exitError
	}
	b, _ := json.Marshal(sum)
	fmt.Fprintln(w, string(b))
	return code
}
