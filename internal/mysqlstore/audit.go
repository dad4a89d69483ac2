package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// execer runs a statement: the pool (autocommit) or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Stages of an audited write at which a test hook (Store.auditHook) runs.
const (
	stageRowChanged = "row"    // the row statement won; the audit row is not inserted yet
	stageAudited    = "commit" // both statements ran; COMMIT is next
)

// write runs a guarded row change. row runs the statement on ex and reports
// whether it won. Without an event it runs on the pool: one autocommit
// statement, exactly as without auditing. With one, the statement and the
// event's INSERT are one transaction: both or neither. A statement that
// loses (0 rows changed, a duplicate claim) writes no event: the
// transaction is rolled back and row's answer returned as is.
//
// A commit whose reply is lost may have applied: its error is
// ErrOutcomeUnknown, and the engine re-reads the row. Whichever way it
// went, the event went the same way.
func (s *Store) write(ctx context.Context, e *store.AuditEvent, row func(ex execer) (bool, error)) (bool, error) {
	if e == nil {
		return row(s.db)
	}
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return false, interpretError(err)
	}
	ok, err := row(tx)
	if !ok || err != nil {
		_ = tx.Rollback()
		return false, err
	}
	s.hook(ctx, stageRowChanged, tx)
	if _, err := tx.ExecContext(ctx, appendOneSQL, auditArgs(nil, e)...); err != nil {
		if err := interpretError(err); !errors.Is(err, store.ErrDuplicate) {
			_ = tx.Rollback()
			return false, err
		}
		// The event id is stored already (its batched copy, say): InnoDB
		// rolled back only the INSERT, and the change commits with the
		// one event there is.
	}
	s.hook(ctx, stageAudited, tx)
	if err := tx.Commit(); err != nil {
		return false, commitError(err)
	}
	return true, nil
}

func (s *Store) hook(ctx context.Context, stage string, tx *sqlx.Tx) {
	if s.auditHook != nil {
		s.auditHook(ctx, stage, tx)
	}
}

// commitError is a failed COMMIT: whatever the error, the server may have
// committed before the reply was lost, so the outcome is unknown.
//
// Even a COMMIT the driver reports unsent (ErrBadConn) stays unknown here:
// the transaction is lost either way, but the engine pays one re-read for
// the certainty, and ErrNotSent never reaches it from a commit.
func commitError(err error) error {
	interpreted := interpretError(err)
	if errors.Is(interpreted, store.ErrOutcomeUnknown) {
		return interpreted
	}
	if errors.Is(interpreted, store.ErrNotSent) {
		interpreted = err
	}
	return fmt.Errorf("%w: commit: %w", store.ErrOutcomeUnknown, interpreted)
}

const auditColumns = `event_id, kind, at, tenant, scope, key_hash, attempt, actor, original_at, stop_reason, detail`

// auditRow is one row's placeholders, in auditColumns' order (see auditArgs).
const auditRow = `(?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, ''), NULLIF(?, ''))`

// appendSQL inserts n events, a plain INSERT: an event id already stored
// fails the whole statement with a duplicate key (1062), and AppendAudit
// then inserts only the rest. Never INSERT IGNORE: it would also turn a
// value too long for its column into a warning and a truncated row. Nor
// INSERT ... ON DUPLICATE KEY UPDATE event_id = event_id: MariaDB checks
// the UPDATE privilege on every inserted column for it, even when nothing
// is updated, and the service's database user may only INSERT and SELECT
// events (docs/OPERATIONS.md), so that it can never rewrite the trail.
func appendSQL(n int) string {
	return `INSERT INTO idempotency_audit (` + auditColumns + `) VALUES ` + strings.Repeat(auditRow+`, `, n-1) + auditRow
}

var appendOneSQL = appendSQL(1)

// appendDeadlockRetries bounds the reruns of a batch chosen as a deadlock
// victim (see appendBatch).
const appendDeadlockRetries = 5

// maxAppendRows bounds the rows of one INSERT (11 placeholders each, far
// below the protocol's 65,535 and max_allowed_packet).
const maxAppendRows = 1000

// auditArgs appends e's values in auditColumns' order. Times are stored in
// UTC, truncated to the column's microsecond (MySQL would round).
func auditArgs(args []any, e *store.AuditEvent) []any {
	var original any
	if !e.OriginalAt.IsZero() {
		original = dbTime(e.OriginalAt)
	}
	return append(args, e.ID, string(e.Kind), dbTime(e.At), e.Tenant, e.Scope, e.KeyHash, e.Attempt, e.Actor,
		original, string(e.StopReason), e.Detail)
}

func dbTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// AppendAudit implements store.Store: one multi-row INSERT per
// maxAppendRows events, each its own autocommit statement; an event id
// already stored (or twice in events) is skipped, never an error.
func (s *Store) AppendAudit(ctx context.Context, events []store.AuditEvent) error {
	events = firstOfEachID(events)
	for len(events) > 0 {
		n := min(len(events), maxAppendRows)
		if err := s.appendBatch(ctx, events[:n]); err != nil {
			return err
		}
		events = events[n:]
	}
	return nil
}

// appendBatch inserts batch (ids distinct). The common case is one
// statement. When some ids are stored already (a batch retried after a
// lost reply), the INSERT fails whole with a duplicate key; the ids found
// stored are dropped and the rest inserted, until none is left. Each round
// drops at least one id, as a duplicate means one of the batch's ids is
// committed (a concurrent uncommitted insert of it makes the INSERT wait
// for its outcome), so the loop ends.
//
// Two writers of overlapping batches at once (a retry racing the attempt
// it retries) can deadlock on the duplicate keys' locks: the victim's
// INSERT was rolled back whole, and an INSERT of events is idempotent, so
// it is simply run again, up to appendDeadlockRetries times.
func (s *Store) appendBatch(ctx context.Context, batch []store.AuditEvent) error {
	deadlocks := 0
	for {
		args := make([]any, 0, len(batch)*11)
		for i := range batch {
			args = auditArgs(args, &batch[i])
		}
		query := appendOneSQL
		if len(batch) > 1 {
			query = appendSQL(len(batch))
		}
		_, err := s.db.ExecContext(ctx, query, args...)
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == errDeadlock && deadlocks < appendDeadlockRetries && ctx.Err() == nil {
			deadlocks++
			continue
		}
		if err := interpretError(err); !errors.Is(err, store.ErrDuplicate) {
			return err
		}
		ids := make([]string, len(batch))
		for i := range batch {
			ids[i] = batch[i].ID
		}
		q, qargs, err := sqlx.In(`SELECT event_id FROM idempotency_audit WHERE event_id IN (?)`, ids)
		if err != nil {
			return err
		}
		var stored []string
		if err := s.db.SelectContext(ctx, &stored, q, qargs...); err != nil {
			return interpretError(err)
		}
		if len(stored) == 0 {
			return errors.New("mysqlstore: audit INSERT reported a duplicate event id, but none of the batch is stored")
		}
		have := make(map[string]bool, len(stored))
		for _, id := range stored {
			have[id] = true
		}
		batch = slices.DeleteFunc(slices.Clone(batch), func(e store.AuditEvent) bool { return have[e.ID] })
		if len(batch) == 0 {
			return nil
		}
	}
}

// firstOfEachID returns events without the repeats of an id (the first is
// kept), as one INSERT cannot hold an id twice.
func firstOfEachID(events []store.AuditEvent) []store.AuditEvent {
	seen := make(map[string]bool, len(events))
	var out []store.AuditEvent
	for i, e := range events {
		if seen[e.ID] {
			if out == nil {
				out = slices.Clone(events[:i])
			}
			continue
		}
		seen[e.ID] = true
		if out != nil {
			out = append(out, e)
		}
	}
	if out == nil {
		return events
	}
	return out
}

// historySQL reads one key's events (under each of its hashes) through
// idx_idempotency_audit_key_at.
const historySQL = `SELECT ` + auditColumns + `
FROM idempotency_audit WHERE tenant = ? AND scope = ? AND key_hash IN (?)
ORDER BY at, event_id LIMIT ?`

type auditRecord struct {
	ID         string         `db:"event_id"`
	Kind       string         `db:"kind"`
	At         time.Time      `db:"at"`
	Tenant     string         `db:"tenant"`
	Scope      string         `db:"scope"`
	KeyHash    string         `db:"key_hash"`
	Attempt    int            `db:"attempt"`
	Actor      string         `db:"actor"`
	OriginalAt sql.NullTime   `db:"original_at"`
	StopReason sql.NullString `db:"stop_reason"`
	Detail     sql.NullString `db:"detail"`
}

// History implements store.Store.
func (s *Store) History(ctx context.Context, tenant, scope string, keyHashes []string, limit int) ([]store.AuditEvent, error) {
	if len(keyHashes) == 0 || limit <= 0 {
		return nil, nil
	}
	query, args, err := sqlx.In(historySQL, tenant, scope, keyHashes, limit)
	if err != nil {
		return nil, err
	}
	var recs []auditRecord
	if err := s.db.SelectContext(ctx, &recs, query, args...); err != nil {
		return nil, interpretError(err)
	}
	out := make([]store.AuditEvent, len(recs))
	for i, r := range recs {
		out[i] = store.AuditEvent{ID: r.ID, Kind: store.AuditKind(r.Kind), At: r.At.UTC(), Tenant: r.Tenant,
			Scope: r.Scope, KeyHash: r.KeyHash, Attempt: r.Attempt, Actor: r.Actor,
			StopReason: sanitize.StopReason(r.StopReason.String), Detail: r.Detail.String}
		if r.OriginalAt.Valid {
			out[i].OriginalAt = r.OriginalAt.Time.UTC()
		}
	}
	return out, nil
}
