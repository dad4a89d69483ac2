package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"github.com/idemguard/idemguard/store"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/testdb"
	igmysql "github.com/idemguard/idemguard/mysql"
)

// grantStatement matches the CREATE USER and GRANT statements of the least-privilege users in
// docs/OPERATIONS.md (each on one line, ending in a semicolon).
var grantStatement = regexp.MustCompile(`(?m)^(?:CREATE USER|GRANT) [^;\n]*;`)

// documentedGrants returns the CREATE USER and GRANT statements of docs/OPERATIONS.md.
func documentedGrants(t *testing.T) []string {
	t.Helper()
	ops, err := os.ReadFile("../docs/OPERATIONS.md")
	require.NoError(t, err)
	stmts := grantStatement.FindAllString(string(ops), -1)
	require.NotEmpty(t, stmts, "docs/OPERATIONS.md documents no CREATE USER or GRANT statement")
	return stmts
}

// dbUser is one documented user, created for the test under a unique name.
type dbUser struct {
	documented string // e.g. idemguard_app
	name       string
	password   string
}

// TestLeastPrivilegeGrants creates the database users of docs/OPERATIONS.md with exactly the
// grants documented there (on a fresh database, under unique names), migrates as the admin, and
// runs serve as the service user and cleanup (pruning a stats bucket and an audit event), cleanup
// --dry-run and stats as the operations user, and writes and reads the audit trail as the service
// user: every command must succeed, nothing may be denied.
func TestLeastPrivilegeGrants(t *testing.T) {
	t.Parallel()
	db := database(t) // migrated by `idemguard migrate up` as the admin
	admin := testdb.ServerDSN(t)
	stmts := documentedGrants(t)

	suffix := randomSuffix(t)
	users := map[string]*dbUser{}
	for _, doc := range []string{"idemguard_app", "idemguard_ops"} {
		users[doc] = &dbUser{documented: doc, name: "igt_" + strings.TrimPrefix(doc, "idemguard_") + "_" + suffix, password: "pw-" + suffix}
	}
	adminDB := openDSN(t, admin)
	for _, stmt := range stmts {
		s := stmt
		var u *dbUser
		for doc, cand := range users {
			if strings.Contains(s, "'"+doc+"'@") {
				u = cand
				s = strings.ReplaceAll(s, "'"+doc+"'@", "'"+cand.name+"'@")
			}
		}
		require.NotNil(t, u, "a documented statement for a user the test does not know: %s", stmt)
		if strings.HasPrefix(s, "CREATE USER") {
			require.Contains(t, s, "IDENTIFIED BY '...'", "the documented CREATE USER changed shape: %s", stmt)
			s = strings.Replace(s, "'...'", "'"+u.password+"'", 1)
			_, err := adminDB.Exec(s)
			require.NoError(t, err, "%s", stmt)
			name := u.name
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if _, err := adminDB.ExecContext(ctx, "DROP USER IF EXISTS '"+name+"'@'%'"); err != nil {
					t.Errorf("drop user %s: %v", name, err)
				}
			})
			continue
		}
		require.Contains(t, s, " ON idemguard.", "a documented GRANT not on the idemguard database: %s", stmt)
		s = strings.Replace(s, " ON idemguard.", " ON `"+db.Name+"`.", 1)
		_, err := adminDB.Exec(s)
		require.NoError(t, err, "%s", stmt)
	}
	for doc, u := range users {
		var n int
		require.NoError(t, adminDB.Get(&n, "SELECT COUNT(*) FROM mysql.user WHERE user = ?", u.name), doc)
		require.Equal(t, 1, n, "docs/OPERATIONS.md creates no user %s", doc)
	}
	appDSN := dsnAs(t, db.DSN, users["idemguard_app"])
	opsDSN := dsnAs(t, db.DSN, users["idemguard_ops"])

	// serve as the service user: ready, one request, its replay; the hourly counters are
	// flushed on SIGTERM.
	llm, c := newFakeLLM(t), newClient(t)
	s := startService(t, productionEnv(appDSN), chatConfig(llm, "  - {name: chat, operation: openai_chat}\n", ""))
	eventually(t, 20*time.Second, "/readyz answers 200 as the service user", func() bool {
		a, err := tryDo(c, s, request{method: "GET", path: "/readyz"})
		return err == nil && a.status == 200
	})
	first := post(t, c, s, "chat", acmeKey, "grants-1", chatBody)
	requireEnvelope(t, first)
	requireReplayOf(t, first, post(t, c, s, "chat", acmeKey, "grants-1", chatBody))
	require.EqualValues(t, 1, llm.calls.Load())
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, s.waitExit(30*time.Second), "serve exit code; log:\n%s", s.logs.String())
	requireNoDenial(t, "serve", s.logs.String())
	var requests int
	require.NoError(t, db.DB.Get(&requests, "SELECT COALESCE(SUM(requests), 0) FROM idempotency_stats"))
	require.Equal(t, 2, requests, "serve flushed its counters into idempotency_stats; log:\n%s", s.logs.String())

	// An expired key and a stats bucket past the default 90-day retention, for cleanup.
	_, err := db.DB.Exec("UPDATE idempotency_keys SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 HOUR")
	require.NoError(t, err)
	_, err = db.DB.Exec(`INSERT INTO idempotency_stats (bucket_start, scope, requests, updated_at)
		VALUES (UTC_TIMESTAMP(6) - INTERVAL 100 DAY, 'chat', 1, UTC_TIMESTAMP(6) - INTERVAL 100 DAY)`)
	require.NoError(t, err)
	_, err = db.DB.Exec(`INSERT INTO idempotency_audit (event_id, kind, at, tenant, scope, key_hash, attempt)
		VALUES (REPEAT('0', 32), 'replay', UTC_TIMESTAMP(6) - INTERVAL 100 DAY, 'acme', 'chat', REPEAT('a', 64), 1)`)
	require.NoError(t, err)

	type summary struct {
		Deleted      int64 `json:"deleted"`
		StatsDeleted int64 `json:"stats_deleted"`
		AuditDeleted int64 `json:"audit_deleted"`
		DryRun       bool  `json:"dry_run"`
	}
	var dry summary
	out := runAs(t, opsDSN, 0, "cleanup", "--dry-run")
	require.NoError(t, json.Unmarshal(out, &dry), "cleanup --dry-run printed: %s", out)
	require.Equal(t, summary{Deleted: 1, StatsDeleted: 1, AuditDeleted: 1, DryRun: true}, dry)
	require.Equal(t, 1, countRows(t, db), "the dry run deleted nothing")

	var run summary
	out = runAs(t, opsDSN, 0, "cleanup")
	require.NoError(t, json.Unmarshal(out, &run), "cleanup printed: %s", out)
	require.Equal(t, summary{Deleted: 1, StatsDeleted: 1, AuditDeleted: 1}, run)
	require.Equal(t, 0, countRows(t, db))
	var buckets int
	require.NoError(t, db.DB.Get(&buckets, "SELECT COUNT(*) FROM idempotency_stats"))
	require.Equal(t, 1, buckets, "cleanup pruned the old bucket and kept this hour's")

	// Thresholds that cannot be breached: exit 0 means the figures were read.
	out = runAs(t, opsDSN, 0, "stats", "--since", "24h", "--json",
		"--min-hit-rate", "0", "--max-failure-rate", "1", "--max-takeover-rate", "1")
	var report struct {
		Counts struct {
			Requests int64 `json:"requests"`
			Replays  int64 `json:"replays"`
		} `json:"counts"`
	}
	require.NoError(t, json.Unmarshal(out, &report), "stats printed: %s", out)
	require.EqualValues(t, 2, report.Counts.Requests, "stats printed: %s", out)
	require.EqualValues(t, 1, report.Counts.Replays, "stats printed: %s", out)

	// The audit trail as the service user, who may only INSERT and SELECT events (and add to
	// the counts): a claim carrying its event, a batch appended twice (the repeated durable event
	// skipped without an UPDATE, the replay counted twice), the key's history read back.
	ctx := t.Context()
	app, err := igmysql.Open(ctx, appDSN, igmysql.PoolConfig{})
	require.NoError(t, err)
	defer app.Close()
	st := igmysql.NewStore(app)
	kh := strings.Repeat("ab", 32)
	now := time.Now().UTC().Truncate(time.Microsecond)
	claimed := store.AuditEvent{ID: strings.Repeat("1", 32), Kind: store.AuditClaimed, At: now, Tenant: "acme",
		Scope: "grants", KeyHash: kh, Attempt: 1, Actor: "h:grants"}
	_, err = st.Claim(ctx, store.ClaimParams{Tenant: "acme", Scope: "grants", KeyHash: kh, Fingerprint: kh,
		Nonce: strings.Repeat("n", 32), TTL: time.Hour, Audit: &claimed})
	require.NoError(t, err)
	replay := claimed
	replay.ID, replay.Kind, replay.At, replay.OriginalAt = strings.Repeat("2", 32), store.AuditReplay, now.Add(time.Second), now
	require.NoError(t, st.AppendAudit(ctx, []store.AuditEvent{replay}))
	require.NoError(t, st.AppendAudit(ctx, []store.AuditEvent{claimed, replay}))
	history, err := st.History(ctx, "acme", "grants", []string{kh}, 10)
	require.NoError(t, err)
	counted := replay
	counted.Count, counted.LastAt = 2, replay.At
	require.Equal(t, []store.AuditEvent{claimed, counted}, history)
}

// runAs runs the binary with IDEMGUARD_MYSQL_DSN=dsn, requires exit code want and no denied
// privilege in its log, and returns its stdout.
func runAs(t *testing.T, dsn string, want int, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "IDEMGUARD_MYSQL_DSN=" + dsn}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "idemguard %s", strings.Join(args, " "))
		code = ee.ExitCode()
	}
	require.Equal(t, want, code, "idemguard %s: exit code; stdout:\n%s\nstderr:\n%s", strings.Join(args, " "), stdout.String(), stderr.String())
	requireNoDenial(t, "idemguard "+strings.Join(args, " "), stderr.String())
	return stdout.Bytes()
}

// requireNoDenial fails on a MySQL privilege error in a log: 1142 (command denied on a table),
// 1143 (on a column), 1044 and 1045 (access denied).
func requireNoDenial(t *testing.T, what, log string) {
	t.Helper()
	for _, denied := range []string{"denied", "Error 1142", "Error 1143", "Error 1044", "Error 1045"} {
		require.NotContains(t, log, denied, "%s was refused a privilege; log:\n%s", what, log)
	}
}

// dsnAs returns dsn with u's credentials.
func dsnAs(t *testing.T, dsn string, u *dbUser) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	cfg.User, cfg.Passwd = u.name, u.password
	return cfg.FormatDSN()
}

func openDSN(t *testing.T, dsn string) *sqlx.DB {
	t.Helper()
	db, err := sqlx.Open("mysql", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}
