// Package mysqlstore is the store.Store on MySQL 8.x / MariaDB 10.11+ (and
// TiDB), through sqlx. Every method is one autocommit statement, except a
// write whose params carry an audit event (store.AuditEvent): Reclaim,
// Abandon, Release and RequestCancel then run the same statement and the
// event's INSERT into idempotency_audit in one transaction, committed only
// when the statement won, so the row change and its event are stored both
// or neither (audit.go); an expired re-claim and the release of a fresh
// claim also move, first, the claimed event the row carries. Claim stays
// one INSERT with or without an event: the row carries its claimed event
// (claim_event_id, claimed_by). Without an event nothing changes: one
// statement, no transaction, no extra round trip. Replays, in-progress
// answers and conflicts are counted in idempotency_audit_tally. Ownership is decided only
// by the INSERT's unique key and by nonce-guarded UPDATEs whose affected-row
// count is checked. Every time in idempotency_keys is the database's clock
// (UTC_TIMESTAMP(6)), never the application server's; an audit event's time
// is the one the engine gave it.
//
// go-sql-driver reports rows *changed*, not rows matched. Every guarded
// UPDATE here changes at least one column of the row it matches — a new
// claim_nonce, a new status, or (heartbeat) a timestamp forced to move
// forward — so "1 row changed" means "we matched and won".
//
// This package holds every SQL statement on idemguard's tables: the
// store's (this file, audit.go, jobs.go), and those the binary's cleanup
// (purge.go), stats recorder, `idemguard stats` and operator page
// (stats.go) run, so that a rule written in SQL is written once. The public
// package github.com/idemguard/idemguard/mysql wraps it with Open, NewStore
// and Migrate; what only the binary and the module's tests use (the purges,
// the figures, the test hooks) stays here, out of the public surface.
package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/idemguard/idemguard/internal/mysqlconn"
	"github.com/idemguard/idemguard/store"
)

var _ store.Store = (*Store)(nil)

// MySQL error numbers the store acts on. They are matched by number, never
// by message text (MySQL and MariaDB word them differently).
const (
	errDupEntry        = 1062 // ER_DUP_ENTRY: the unique key exists
	errDeadlock        = 1213 // ER_LOCK_DEADLOCK: also a Galera certification failure / TiDB write conflict
	errLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT: the statement waited too long for a row lock
	// ER_TRANSACTION_ROLLBACK_DURING_COMMIT: a certification failure of
	// MySQL Group Replication (InnoDB Cluster) in multi-primary mode.
	errGRRollback = 3101
	// TiDB's write conflict in optimistic transactions.
	errTiDBWriteConflict = 9007
)

// Store is the MySQL store.Store. It is safe for concurrent use.
type Store struct {
	db *sqlx.DB
	// completedAtOf reads the value of LAST_INSERT_ID(expr) from an OK
	// packet (Complete's completed_at, Renew's cancel flag); tests
	// stand in for an engine that reports 0 there.
	completedAtOf func(sql.Result) (int64, error)
	// auditHook, if set, runs inside an audited write's transaction at
	// each stage (audit.go); tests break the connection there.
	auditHook func(ctx context.Context, stage string, tx *sqlx.Tx)
}

// New returns a Store over db, which should come from mysqlconn.Open (UTC,
// parseTime, strict SQL mode).
func New(db *sqlx.DB) *Store { return &Store{db: db} }

// DB returns the underlying pool.
func (s *Store) DB() *sqlx.DB { return s.db }

// interpretError is the one place that reads driver errors.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	if notSent(err) {
		return fmt.Errorf("%w: %w", store.ErrNotSent, err)
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case errDupEntry:
			return store.ErrDuplicate
		case errDeadlock, errLockWaitTimeout, errGRRollback, errTiDBWriteConflict:
			// The statement was rolled back, but "lost the race" is not
			// what it means: a deadlock victim on one server still owns
			// its row. Only a re-read of the row can tell: ownership is
			// decided by the row, never by the error.
			// Read as unknown, an error whose statement surely did not
			// apply costs a read, never a second execution.
			return fmt.Errorf("%w: %w", store.ErrOutcomeUnknown, err)
		}
	}
	if errors.Is(err, mysql.ErrInvalidConn) {
		// The connection broke after the statement was sent: it may
		// have applied.
		return fmt.Errorf("%w: %w", store.ErrOutcomeUnknown, err)
	}
	return err
}

// notSent reports whether err proves that the statement never reached the
// server, so that nothing it asked for happened:
//
//   - a *mysqlconn.ConnectError: the pool could not hand out a connection
//     (the dial or the handshake failed, or the server is known down);
//   - a *net.OpError whose Op is "dial", for a pool not opened by
//     mysqlconn.Open: go-sql-driver dials only to open a connection, never
//     once a statement is under way;
//   - driver.ErrBadConn: database/sql's contract is that a driver returns it
//     only when the server cannot have performed the operation, and
//     go-sql-driver (since 1.4; this module requires 1.10) keeps it: it
//     returns ErrBadConn for a connection it knows closed before the
//     statement, and for a write that failed before its first byte went
//     out (errBadConnNoWrite); a write that failed later is
//     mysql.ErrInvalidConn or the network error, both unknown. database/sql
//     itself returns it only for a pooled connection it discards before use.
//     Inside a transaction, an earlier statement may have run, but the
//     transaction can then never commit: the driver closed the connection,
//     and the server rolls it back.
//
// Everything else that breaks on the wire (a timeout, a connection lost
// mid-statement, a context that ended) may have been sent: its outcome is
// unknown. A COMMIT is never "not sent" (commitError).
func notSent(err error) bool {
	var ce *mysqlconn.ConnectError
	var oe *net.OpError
	return errors.As(err, &ce) || (errors.As(err, &oe) && oe.Op == "dial") || errors.Is(err, driver.ErrBadConn)
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// claimSQL inserts a started row; with an audit event, the row carries it
// (claim_event_id, claimed_by): the claim is this one statement with the
// trail as without it.
const claimSQL = `INSERT INTO idempotency_keys
  (tenant, scope, key_hash, request_fingerprint, secret_id, status, attempt_count, claim_nonce,
   created_at, started_at, heartbeat_at, lease_micros, expires_at, claim_event_id, claimed_by)
VALUES (?, ?, ?, ?, NULLIF(?, ''), 'started', 1, ?,
   UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), NULLIF(?, 0), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, ?, ?)`

// The claim and the completion run for every fresh key (a streamed or
// progress-reporting operation completes with completeProgressSQL), the
// read of one key for every replay the store answers: each pool
// connection prepares them on the server once and executes them with the
// binary protocol (mysqlconn.Prepare). Every other statement goes as text.
func init() { mysqlconn.Prepare(claimSQL, completeSQL, completeProgressSQL, getSQL) }

// Claim implements store.Store: one autocommit INSERT, its audit event
// (if any) carried by the row (store.ClaimParams.Audit). Never INSERT
// IGNORE: it would turn a truncation or a bad value into a warning and a
// silently different row.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) (uint64, error) {
	var eventID, actor any // NULL without an event
	if p.Audit != nil {
		eventID, actor = p.Audit.ID, p.Audit.Actor
	}
	res, err := s.db.ExecContext(ctx, claimSQL, p.Tenant, p.Scope, p.KeyHash, p.Fingerprint, p.SecretID, p.Nonce,
		micros(p.Lease), micros(p.TTL), eventID, actor)
	if err := interpretError(err); err != nil {
		return 0, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, err
	}
	return uint64(id), nil
}

type row struct {
	ID           uint64         `db:"id"`
	Tenant       string         `db:"tenant"`
	Scope        string         `db:"scope"`
	KeyHash      string         `db:"key_hash"`
	Fingerprint  string         `db:"request_fingerprint"`
	Status       string         `db:"status"`
	Attempts     int            `db:"attempt_count"`
	ClaimNonce   string         `db:"claim_nonce"`
	Response     []byte         `db:"response_json"`
	ResponseCode sql.NullInt32  `db:"response_code"`
	Events       []byte         `db:"response_events"`
	CreatedAt    time.Time      `db:"created_at"`
	StartedAt    time.Time      `db:"started_at"`
	HeartbeatAt  sql.NullTime   `db:"heartbeat_at"`
	CompletedAt  sql.NullTime   `db:"completed_at"`
	ExpiresAt    time.Time      `db:"expires_at"`
	LeaseMicros  sql.NullInt64  `db:"lease_micros"`
	CancelAt     sql.NullTime   `db:"cancel_requested_at"`
	Progress     sql.NullString `db:"progress"`
	SecretID     sql.NullString `db:"secret_id"`
	Now          time.Time      `db:"db_now"`
}

// dest is r's fields in getSQL's column order, for Scan.
func (r *row) dest() []any {
	return []any{&r.ID, &r.Tenant, &r.Scope, &r.KeyHash, &r.Fingerprint, &r.Status, &r.Attempts, &r.ClaimNonce,
		&r.Response, &r.ResponseCode, &r.Events, &r.CreatedAt, &r.StartedAt, &r.HeartbeatAt, &r.CompletedAt, &r.ExpiresAt,
		&r.LeaseMicros, &r.CancelAt, &r.Progress, &r.SecretID, &r.Now}
}

const getSQL = `SELECT id, tenant, scope, key_hash, request_fingerprint, status, attempt_count, claim_nonce,
  response_json, response_code, response_events, created_at, started_at, heartbeat_at, completed_at, expires_at,
  lease_micros, cancel_requested_at, progress, secret_id, UTC_TIMESTAMP(6) AS db_now
FROM idempotency_keys WHERE tenant = ? AND scope = ? AND key_hash = ?`

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, tenant, scope, keyHash string) (store.Record, error) {
	// A plain Scan in getSQL's column order: sqlx's StructScan maps columns to
	// fields by reflection on every call, and Get is the whole of a store
	// replay. TestGetScansEveryColumn checks the order against the struct tags.
	var r row
	err := mysqlconn.ScanRow(ctx, s.db.DB, getSQL, []any{tenant, scope, keyHash}, r.dest()...)
	if err := interpretError(err); err != nil {
		return store.Record{}, err
	}
	return r.record(), nil
}

// getManySQL is getSQL for several key hashes, with the same columns in the
// same order: one read of the unique key (tenant, scope, key_hash), as many
// points as hashes. getManySQLs holds it for the usual counts (a previous
// secret or two), so that GetMany, which the claim path runs after every
// won claim while previous secrets are configured, builds no query text.
var (
	getManySQL  = strings.Replace(getSQL, "AND key_hash = ?", "AND key_hash IN (?", 1)
	getManySQLs = [...]string{getManyQuery(1), getManyQuery(2), getManyQuery(3), getManyQuery(4)}
)

// getManyQuery is getManySQL with n placeholders in its IN list.
func getManyQuery(n int) string {
	return getManySQL + strings.Repeat(", ?", n-1) + ")"
}

// GetMany implements store.Store.
func (s *Store) GetMany(ctx context.Context, tenant, scope string, keyHashes []string) ([]store.Record, error) {
	n := len(keyHashes)
	if n == 0 {
		return nil, nil
	}
	query := ""
	if n <= len(getManySQLs) {
		query = getManySQLs[n-1]
	} else {
		query = getManyQuery(n)
	}
	args := make([]any, 0, 2+n)
	args = append(args, tenant, scope)
	for _, h := range keyHashes {
		args = append(args, h)
	}
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err := interpretError(err); err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Record
	for rows.Next() {
		var r row
		if err := rows.Scan(r.dest()...); err != nil {
			return nil, interpretError(err)
		}
		out = append(out, r.record())
	}
	return out, interpretError(rows.Err())
}

func (r *row) record() store.Record {
	return store.Record{ID: r.ID, Tenant: r.Tenant, Scope: r.Scope, KeyHash: r.KeyHash, Fingerprint: r.Fingerprint,
		Status: store.RowStatus(r.Status), Attempts: r.Attempts, ClaimNonce: r.ClaimNonce, Response: r.Response,
		ResponseCode: int(r.ResponseCode.Int32), Events: r.Events, CreatedAt: r.CreatedAt, StartedAt: r.StartedAt,
		HeartbeatAt: r.HeartbeatAt.Time, CompletedAt: r.CompletedAt.Time, ExpiresAt: r.ExpiresAt,
		Lease: time.Duration(r.LeaseMicros.Int64) * time.Microsecond, CancelRequestedAt: r.CancelAt.Time, Now: r.Now,
		SecretID: r.SecretID.String, Progress: parseProgress(r.Progress)}
}

// staleSQL and reclaimableSQL are the staleness rule of package store
// (store.Record.Stale and Reclaimable), written term by term from its
// formula: lease is lease_micros when positive, else the one parameter, the
// reader's StaleAfter in microseconds (a row without a lease: written
// before the column existed, or by a version that does not set it);
// lastBeat is COALESCE(heartbeat_at, started_at); now is UTC_TIMESTAMP(6).
// Every statement that judges staleness uses them, cleanup's DELETE
// (purge.go) included; the conformance case
// Store/StalenessRuleIsOneDefinition proves them equal to the Go rule.
const (
	staleSQL = `(status = 'started'
  AND COALESCE(heartbeat_at, started_at) < UTC_TIMESTAMP(6) - INTERVAL IF(lease_micros > 0, lease_micros, ?) MICROSECOND)`

	reclaimableSQL = `(expires_at < UTC_TIMESTAMP(6) AND (status <> 'started' OR ` + staleSQL + `))`
)

// Every reclaim changes claim_nonce, so a matched row is a changed row.
const (
	reclaimExpiredSQL = `UPDATE idempotency_keys SET
  status = 'started', claim_nonce = ?, attempt_count = 1, request_fingerprint = ?, secret_id = NULLIF(?, ''),
  response_json = NULL, response_code = NULL, response_events = NULL, completed_at = NULL, cancel_requested_at = NULL,
  progress = NULL,
  created_at = UTC_TIMESTAMP(6), started_at = UTC_TIMESTAMP(6), heartbeat_at = UTC_TIMESTAMP(6),
  lease_micros = NULLIF(?, 0), expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
  claim_event_id = NULL, claimed_by = NULL
WHERE id = ? AND claim_nonce = ? AND attempt_count = ? AND ` + reclaimableSQL

	reclaimStaleSQL = `UPDATE idempotency_keys SET
  claim_nonce = ?, attempt_count = attempt_count + 1, cancel_requested_at = NULL,
  progress = NULL,
  started_at = UTC_TIMESTAMP(6), heartbeat_at = UTC_TIMESTAMP(6), lease_micros = NULLIF(?, 0)
WHERE id = ? AND claim_nonce = ? AND attempt_count = ? AND ` + staleSQL

	reclaimFailedSQL = `UPDATE idempotency_keys SET
  status = 'started', claim_nonce = ?, attempt_count = attempt_count + 1,
  response_json = NULL, response_code = NULL, response_events = NULL, completed_at = NULL, cancel_requested_at = NULL,
  progress = NULL,
  started_at = UTC_TIMESTAMP(6), heartbeat_at = UTC_TIMESTAMP(6), lease_micros = NULLIF(?, 0),
  expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
WHERE id = ? AND status = 'failed' AND claim_nonce = ? AND attempt_count = ?
  AND attempt_count < ? AND expires_at >= UTC_TIMESTAMP(6)`

	reclaimForcedSQL = `UPDATE idempotency_keys SET
  status = 'started', claim_nonce = ?, attempt_count = attempt_count + 1,
  response_json = NULL, response_code = NULL, response_events = NULL, completed_at = NULL, cancel_requested_at = NULL,
  started_at = UTC_TIMESTAMP(6), heartbeat_at = UTC_TIMESTAMP(6), lease_micros = NULLIF(?, 0),
  expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
WHERE id = ? AND status IN ('succeeded', 'failed') AND claim_nonce = ? AND attempt_count = ?
  AND expires_at >= UTC_TIMESTAMP(6)`

	// resetSQL ends a finished row's life: a new nonce (so no write made
	// from a read of the old row lands), expired at the Unix epoch (plus a
	// second), a time every clock is past, even one stepped back since.
	resetSQL = `UPDATE idempotency_keys SET
  claim_nonce = ?, cancel_requested_at = NULL, expires_at = '1970-01-01 00:00:01'
WHERE id = ? AND status IN ('succeeded', 'failed') AND claim_nonce = ? AND attempt_count = ?
  AND expires_at >= UTC_TIMESTAMP(6)`
)

// Reclaim implements store.Store.
func (s *Store) Reclaim(ctx context.Context, p store.ReclaimParams) (bool, error) {
	switch p.Kind {
	case store.ReclaimExpired:
		// It overwrites the claim the row carries: its event moves to the
		// trail first, in the same transaction.
		return s.moving(ctx, p.Audit, p.ID, p.OldNonce, reclaimExpiredSQL, p.NewNonce, p.Fingerprint, p.SecretID, micros(p.Lease), micros(p.TTL),
			p.ID, p.OldNonce, p.OldAttempts, micros(p.StaleAfter))
	case store.ReclaimStale:
		return s.audited(ctx, p.Audit, reclaimStaleSQL, p.NewNonce, micros(p.Lease), p.ID, p.OldNonce, p.OldAttempts, micros(p.StaleAfter))
	case store.ReclaimFailed:
		return s.audited(ctx, p.Audit, reclaimFailedSQL, p.NewNonce, micros(p.Lease), micros(p.TTL), p.ID, p.OldNonce, p.OldAttempts, p.MaxAttempts)
	case store.ReclaimForced:
		return s.audited(ctx, p.Audit, reclaimForcedSQL, p.NewNonce, micros(p.Lease), micros(p.TTL), p.ID, p.OldNonce, p.OldAttempts)
	}
	return false, fmt.Errorf("mysqlstore: unknown reclaim kind %d", p.Kind)
}

// Reset implements store.Store.
func (s *Store) Reset(ctx context.Context, p store.ResetParams) (bool, error) {
	return s.audited(ctx, p.Audit, resetSQL, p.NewNonce, p.ID, p.OldNonce, p.OldAttempts)
}

// status changes from started to failed.
const abandonSQL = `UPDATE idempotency_keys SET
  status = 'failed', response_json = ?, response_code = ?,
  completed_at = UTC_TIMESTAMP(6), expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE id = ? AND claim_nonce = ? AND attempt_count = ? AND ` + staleSQL

// Abandon implements store.Store.
func (s *Store) Abandon(ctx context.Context, p store.AbandonParams) (bool, error) {
	// JSON goes in as a string: MySQL 8 refuses binary-charset values in a JSON column.
	return s.audited(ctx, p.Audit, abandonSQL, string(p.Response), p.ResponseCode, micros(p.TTL),
		p.ID, p.OldNonce, p.OldAttempts, micros(p.StaleAfter))
}

// heartbeat_at always moves forward, by at least a microsecond, so a renewal
// in the same microsecond as the claim still changes the row.
const heartbeatSQL = `UPDATE idempotency_keys
SET heartbeat_at = GREATEST(UTC_TIMESTAMP(6), COALESCE(heartbeat_at, started_at) + INTERVAL 1 MICROSECOND)
WHERE id = ? AND status = 'started' AND claim_nonce = ?`

// Heartbeat implements store.Store.
func (s *Store) Heartbeat(ctx context.Context, id uint64, nonce string) (bool, error) {
	return s.guarded(ctx, heartbeatSQL, id, nonce)
}

// status changes from started to succeeded or failed.
//
// completed_at comes back without a second round trip: LAST_INSERT_ID(expr)
// returns expr and makes the server report it in the statement's OK packet
// (LastInsertId), here completed_at in microseconds since the Unix epoch.
// UTC_TIMESTAMP(6) is one value for the whole statement, and 0 * x adds
// nothing to the column.
const completeSQL = `UPDATE idempotency_keys SET
  status = ?, response_json = ?, response_code = ?, response_events = ?, attempt_count = attempt_count - ?,
  completed_at = UTC_TIMESTAMP(6)
    + INTERVAL 0 * LAST_INSERT_ID(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))) MICROSECOND,
  expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE id = ? AND status = 'started' AND claim_nonce = ?`

// completeProgressSQL is completeSQL with the execution's last progress
// (see renewProgressSQL), at its completed_at.
var completeProgressSQL = strings.Replace(completeSQL, "\nWHERE", `,
  progress = `+progressSQL("completed_at")+`
WHERE`, 1)

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, p store.CompleteParams) (bool, time.Time, error) {
	if p.Status != store.RowSucceeded && p.Status != store.RowFailed {
		return false, time.Time{}, fmt.Errorf("mysqlstore: cannot complete with status %q", p.Status)
	}
	giveBack := 0
	if p.Canceled {
		giveBack = 1 // a started row's attempt_count is at least 1
	}
	// One backing array for all the arguments (at most 11): appending the
	// last two to a literal of six would copy it into a second one.
	query, args := completeSQL, make([]any, 0, 11)
	args = append(args, statusArg(p.Status), string(p.Response), p.ResponseCode, p.Events, giveBack, micros(p.TTL))
	if g := p.Progress; g != nil {
		query, args = completeProgressSQL, append(args, g.Done, g.Total, g.Stage)
	}
	res, err := s.db.ExecContext(ctx, query, append(args, p.ID, p.Nonce)...)
	ok, err := changedOne(res, err)
	if !ok || err != nil {
		return false, time.Time{}, err
	}
	at, err := s.okPacketTime(res)
	if err != nil {
		return false, time.Time{}, err
	}
	if at <= 0 {
		// An engine that does not report LAST_INSERT_ID(expr) in the OK
		// packet (TiDB may answer 0): read completed_at back. If that
		// read fails, the error makes the engine re-read the row, which
		// shows the commit landed and its time.
		var completed time.Time
		err := s.db.GetContext(ctx, &completed,
			`SELECT completed_at FROM idempotency_keys WHERE id = ? AND claim_nonce = ?`, p.ID, p.Nonce)
		if err != nil {
			return false, time.Time{}, interpretError(err)
		}
		return true, completed.UTC(), nil
	}
	return true, time.UnixMicro(at).UTC(), nil
}

// The two final statuses as statement arguments, boxed once: converting
// the string to an interface on every Complete would allocate.
var succeededArg, failedArg any = string(store.RowSucceeded), string(store.RowFailed)

// statusArg is string(st) as a statement argument.
func statusArg(st store.RowStatus) any {
	switch st {
	case store.RowSucceeded:
		return succeededArg
	case store.RowFailed:
		return failedArg
	}
	return string(st)
}

// Release deletes the row (no previous row) or restores the previous one;
// either way claim_nonce changes, so a matched row is a changed row.
const (
	releaseDeleteSQL = `DELETE FROM idempotency_keys WHERE id = ? AND status = 'started' AND claim_nonce = ?`

	releaseRestoreSQL = `UPDATE idempotency_keys SET
  status = ?, claim_nonce = ?, attempt_count = ?, response_json = ?, response_code = ?, response_events = ?,
  started_at = ?, heartbeat_at = ?, completed_at = ?, expires_at = ?, lease_micros = NULLIF(?, 0)
WHERE id = ? AND status = 'started' AND claim_nonce = ?`
)

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, p store.ReleaseParams) (bool, error) {
	if p.Prev == nil {
		// The row goes, and with it the claim it carries: its event moves
		// to the trail first, in the same transaction.
		return s.moving(ctx, p.Audit, p.ID, p.Nonce, releaseDeleteSQL, p.ID, p.Nonce)
	}
	r := p.Prev
	var response, code, heartbeat, completed any
	if r.Response != nil {
		response = string(r.Response)
	}
	if r.ResponseCode != 0 {
		code = r.ResponseCode
	}
	if !r.HeartbeatAt.IsZero() {
		heartbeat = r.HeartbeatAt
	}
	if !r.CompletedAt.IsZero() {
		completed = r.CompletedAt
	}
	return s.audited(ctx, p.Audit, releaseRestoreSQL, string(r.Status), r.ClaimNonce, r.Attempts, response, code, r.Events,
		r.StartedAt, heartbeat, completed, r.ExpiresAt, micros(r.Lease), p.ID, p.Nonce)
}

// guarded runs a guarded UPDATE and reports whether it changed exactly one row.
func (s *Store) guarded(ctx context.Context, query string, args ...any) (bool, error) {
	return changedOne(s.db.ExecContext(ctx, query, args...))
}

// audited is guarded with an audit event written in the same transaction
// when the UPDATE changed the row; without one (e nil) it is guarded.
func (s *Store) audited(ctx context.Context, e *store.AuditEvent, query string, args ...any) (bool, error) {
	if e == nil {
		return s.guarded(ctx, query, args...)
	}
	return s.write(ctx, e, func(ex execer) (bool, error) { return changedOne(ex.ExecContext(ctx, query, args...)) })
}

// moving is audited for a statement that overwrites or deletes row id
// (owned by nonce) with the claim it carries: in the transaction, the
// claimed event moves from the row to the trail before the statement runs
// (moveClaim). When the statement loses, the move is rolled back with it.
func (s *Store) moving(ctx context.Context, e *store.AuditEvent, id uint64, nonce, query string, args ...any) (bool, error) {
	if e == nil {
		return s.guarded(ctx, query, args...)
	}
	return s.write(ctx, e, func(ex execer) (bool, error) {
		if ours, err := moveClaim(ctx, ex.(rowQueryer), id, nonce); !ours || err != nil {
			return false, err
		}
		return changedOne(ex.ExecContext(ctx, query, args...))
	})
}

// changedOne reports whether a guarded statement changed exactly one row.
func changedOne(res sql.Result, err error) (bool, error) {
	if err := interpretError(err); err != nil {
		return false, err // ErrOutcomeUnknown included: the engine re-reads
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if n > 1 {
		return false, fmt.Errorf("mysqlstore: guarded update changed %d rows", n)
	}
	return n == 1, nil
}

// Ping implements store.Store.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// okPacketTime is completed_at as Complete's OK packet reported it.
func (s *Store) okPacketTime(res sql.Result) (int64, error) {
	if s.completedAtOf != nil {
		return s.completedAtOf(res)
	}
	return res.LastInsertId()
}
