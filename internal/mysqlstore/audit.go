package mysqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
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

// AppendAudit implements store.Store: the durable events one multi-row
// INSERT into idempotency_audit per maxAppendRows events, each its own
// autocommit statement, an event id already stored (or twice in events)
// skipped, never an error; the tallied kinds added to their tallies in
// idempotency_audit_tally (appendTallies).
func (s *Store) AppendAudit(ctx context.Context, events []store.AuditEvent) error {
	// The durable events are copied aside (few, when any); the tallied
	// ones, a batch's bulk, are summed where they are.
	var durable []store.AuditEvent
	for i := range events {
		if !events[i].Kind.Tallied() {
			durable = append(durable, events[i])
		}
	}
	durable = firstOfEachID(durable)
	for len(durable) > 0 {
		n := min(len(durable), maxAppendRows)
		if err := s.appendBatch(ctx, durable[:n]); err != nil {
			return err
		}
		durable = durable[n:]
	}
	return s.appendTallies(ctx, events)
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

// moveClaimSQL writes the claimed event row id (owned by the nonce)
// carries to the trail, as the row is about to be overwritten or deleted
// in the same transaction (see store.ClaimParams.Audit). The event is the
// one History read from the row: at = created_at, attempt 1. A row without
// one (claimed with the trail off) inserts nothing.
const moveClaimSQL = `INSERT INTO idempotency_audit (` + auditColumns + `)
SELECT claim_event_id, 'claimed', created_at, tenant, scope, key_hash, 1, COALESCE(claimed_by, ''), NULL, NULL, NULL
FROM idempotency_keys WHERE id = ? AND claim_nonce = ? AND claim_event_id IS NOT NULL`

// lockClaimSQL locks row id while it is still owned by the nonce, before
// its claimed event is read and the row overwritten.
const lockClaimSQL = `SELECT id FROM idempotency_keys WHERE id = ? AND claim_nonce = ? FOR UPDATE`

// rowQueryer reads one row: the transaction moveClaim runs in.
type rowQueryer interface {
	execer
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// moveClaim moves the claimed event row id carries into the trail, in the
// transaction tx, and reports whether the row is still owned by the nonce
// (false: another writer got there first, and nothing was written).
//
// It locks the row first (lockClaimSQL), exclusively: moveClaimSQL alone
// would take a shared lock, and two writers racing for the row (a storm
// on an expired key) would each hold one while waiting for the other's to
// go, a deadlock: an unknown outcome the engine pays a re-read for. A
// writer that waited finds the nonce changed and stops there.
//
// An event id stored already (cleanup moved it a moment ago, see
// purge.go) is no error: the failed INSERT is rolled back alone, and the
// trail has the event.
func moveClaim(ctx context.Context, tx rowQueryer, id uint64, nonce string) (bool, error) {
	var locked uint64
	if err := interpretError(tx.QueryRowContext(ctx, lockClaimSQL, id, nonce).Scan(&locked)); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return false, err
	}
	_, err := tx.ExecContext(ctx, moveClaimSQL, id, nonce)
	if err := interpretError(err); err != nil && !errors.Is(err, store.ErrDuplicate) {
		return false, err
	}
	return true, nil
}

// tallyColumns are idempotency_audit_tally's columns as appendTallies
// writes them.
const tallyColumns = `tenant, scope, key_hash, kind, attempt, actor, detail, event_id, first_at, last_at, n, original_at`

// tallyRow is one row's placeholders, in tallyColumns' order.
const tallyRow = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// tallySQL adds n tallies to theirs, like idempotency_stats' counters.
// event_id and original_at follow the earliest event: they are assigned
// before first_at, so they compare with its old value whether the server
// assigns left to right (MySQL, MariaDB) or all at once (MariaDB's
// SIMULTANEOUS_ASSIGNMENT). VALUES(col), not MySQL 8's row alias, which
// MariaDB lacks.
func tallySQL(n int) string {
	return `INSERT INTO idempotency_audit_tally (` + tallyColumns + `) VALUES ` +
		strings.Repeat(tallyRow+`, `, n-1) + tallyRow + `
ON DUPLICATE KEY UPDATE
  event_id = IF(VALUES(first_at) < first_at, VALUES(event_id), event_id),
  original_at = IF(VALUES(first_at) < first_at, VALUES(original_at), original_at),
  first_at = LEAST(first_at, VALUES(first_at)),
  last_at = GREATEST(last_at, VALUES(last_at)),
  n = n + VALUES(n)`
}

// tallyKey is what a tally aggregates over, in the unique key's order.
type tallyKey struct {
	tenant, scope, keyHash string
	kind                   store.AuditKind
	attempt                int
	actor, detail          string
}

func compareTally(a, b tallyKey) int {
	return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.scope, b.scope), cmp.Compare(a.keyHash, b.keyHash),
		cmp.Compare(a.kind, b.kind), cmp.Compare(a.attempt, b.attempt), cmp.Compare(a.actor, b.actor),
		cmp.Compare(a.detail, b.detail))
}

// tally is a batch's events of one tallyKey.
type tally struct {
	key   tallyKey
	first store.AuditEvent
	last  time.Time
	n     int64
}

// lastOf is the latest time of e, a tally of its caller's or one event
// (store.Store.AppendAudit).
func lastOf(e *store.AuditEvent) time.Time {
	if e.LastAt.After(e.At) {
		return e.LastAt
	}
	return e.At
}

// appendTallies sums the tallied events per tally in memory (skipping the
// durable kinds; an event that is a tally of its caller's counts Count),
// then adds the sums in
// one INSERT ... ON DUPLICATE KEY UPDATE per maxAppendRows tallies, in the
// unique key's order (two writers lock shared tallies in the same order).
// A deadlock victim (or a failed certification on Galera) was rolled back
// whole and is run again; any other error is returned, and the caller must
// not write the batch again unless it was never sent (store.ErrNotSent):
// a tally cannot tell a repeat from new events.
func (s *Store) appendTallies(ctx context.Context, events []store.AuditEvent) error {
	byKey := make(map[tallyKey]*tally)
	for i := range events {
		e := &events[i]
		if !e.Kind.Tallied() {
			continue
		}
		k := tallyKey{e.Tenant, e.Scope, e.KeyHash, e.Kind, e.Attempt, e.Actor, e.Detail}
		n, last := max(1, e.Count), lastOf(e)
		t := byKey[k]
		if t == nil {
			byKey[k] = &tally{key: k, first: *e, last: last, n: n}
			continue
		}
		t.n += n
		if e.At.Before(t.first.At) {
			t.first = *e
		}
		if last.After(t.last) {
			t.last = last
		}
	}
	sums := slices.SortedFunc(maps.Values(byKey), func(a, b *tally) int { return compareTally(a.key, b.key) })
	for len(sums) > 0 {
		n := min(len(sums), maxAppendRows)
		if err := s.addTallies(ctx, sums[:n]); err != nil {
			return err
		}
		sums = sums[n:]
	}
	return nil
}

func (s *Store) addTallies(ctx context.Context, sums []*tally) error {
	args := make([]any, 0, len(sums)*12)
	for _, t := range sums {
		var original any
		if !t.first.OriginalAt.IsZero() {
			original = dbTime(t.first.OriginalAt)
		}
		k := t.key
		args = append(args, k.tenant, k.scope, k.keyHash, string(k.kind), k.attempt, k.actor, k.detail,
			t.first.ID, dbTime(t.first.At), dbTime(t.last), t.n, original)
	}
	query := tallySQL(len(sums))
	for deadlocks := 0; ; deadlocks++ {
		_, err := s.db.ExecContext(ctx, query, args...)
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == errDeadlock && deadlocks < appendDeadlockRetries && ctx.Err() == nil {
			continue
		}
		return interpretError(err)
	}
}

// historyColumns are the columns History reads from each of its sources.
const historyColumns = `event_id, kind, at, tenant, scope, key_hash, attempt, actor, original_at, stop_reason, detail, n, last_at`

// historySQL reads one key's events (under each of its hashes) from the
// three places they live: idempotency_audit (the durable events, through
// idx_idempotency_audit_key_at), idempotency_audit_tally (the tallies,
// through its unique key) and idempotency_keys (the claimed event a row
// carries, through its unique key, unless the trail has that event id
// already: cleanup moves an event a moment before it deletes the row).
// Portable SQL: UNION ALL, no window functions.
const historySQL = `SELECT ` + historyColumns + ` FROM (
  SELECT ` + auditColumns + `, 0 AS n, CAST(NULL AS DATETIME(6)) AS last_at
  FROM idempotency_audit WHERE tenant = ? AND scope = ? AND key_hash IN (?)
  UNION ALL
  SELECT event_id, kind, first_at, tenant, scope, key_hash, attempt, actor, original_at, NULL, NULLIF(detail, ''), n, last_at
  FROM idempotency_audit_tally WHERE tenant = ? AND scope = ? AND key_hash IN (?)
  UNION ALL
  SELECT claim_event_id, 'claimed', created_at, tenant, scope, key_hash, 1, COALESCE(claimed_by, ''), NULL, NULL, NULL, 0, NULL
  FROM idempotency_keys k WHERE tenant = ? AND scope = ? AND key_hash IN (?) AND claim_event_id IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM idempotency_audit a WHERE a.event_id = k.claim_event_id)
) AS trail
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
	Count      int64          `db:"n"`
	LastAt     sql.NullTime   `db:"last_at"`
}

// History implements store.Store.
func (s *Store) History(ctx context.Context, tenant, scope string, keyHashes []string, limit int) ([]store.AuditEvent, error) {
	if len(keyHashes) == 0 || limit <= 0 {
		return nil, nil
	}
	query, args, err := sqlx.In(historySQL, tenant, scope, keyHashes, tenant, scope, keyHashes, tenant, scope, keyHashes, limit)
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
			StopReason: sanitize.StopReason(r.StopReason.String), Detail: r.Detail.String, Count: r.Count}
		if r.OriginalAt.Valid {
			out[i].OriginalAt = r.OriginalAt.Time.UTC()
		}
		if r.LastAt.Valid {
			out[i].LastAt = r.LastAt.Time.UTC()
		}
	}
	return out, nil
}
