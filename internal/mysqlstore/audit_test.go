package mysqlstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
)

// auditedOp is one audited write, set up on its own key so that it wins
// when run.
type auditedOp struct {
	name string
	kind store.AuditKind
	// moves is true when the write overwrites or deletes the claim the row
	// carries, and so moves its event to idempotency_audit.
	moves bool
	// setup prepares the key's row and returns the write (given its event).
	setup func(t *testing.T, s *mysqlstore.Store, db *sqlx.DB, kh string) func(e *store.AuditEvent) (bool, error)
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// claimRow claims kh with an audit event, claimID(kh), which the row
// carries (store.ClaimParams.Audit).
func claimRow(t *testing.T, s *mysqlstore.Store, kh string) (uint64, string) {
	t.Helper()
	n := newID()
	id, err := s.Claim(t.Context(), store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: kh,
		Fingerprint: strings.Repeat("f", 64), Nonce: n, TTL: time.Hour, Lease: time.Minute,
		Audit: &store.AuditEvent{ID: claimID(kh), Kind: store.AuditClaimed, Actor: "key:claimer"}})
	require.NoError(t, err)
	return id, n
}

// age moves every time of the key's row back by d.
func age(t *testing.T, db *sqlx.DB, kh string, d time.Duration) {
	t.Helper()
	us := d.Microseconds()
	_, err := db.ExecContext(t.Context(), `UPDATE idempotency_keys SET
  created_at = created_at - INTERVAL ? MICROSECOND, started_at = started_at - INTERVAL ? MICROSECOND,
  heartbeat_at = heartbeat_at - INTERVAL ? MICROSECOND, completed_at = completed_at - INTERVAL ? MICROSECOND,
  expires_at = expires_at - INTERVAL ? MICROSECOND WHERE key_hash = ?`, us, us, us, us, us, kh)
	require.NoError(t, err)
}

// claimID is the id of the event claimRow's row carries.
func claimID(kh string) string { return "c" + kh[:31] }

func complete(t *testing.T, s *mysqlstore.Store, id uint64, n string, st store.RowStatus) {
	t.Helper()
	ok, _, err := s.Complete(t.Context(), store.CompleteParams{ID: id, Nonce: n, Status: st,
		Response: []byte(`{"ok":false}`), ResponseCode: 502, TTL: time.Hour})
	require.NoError(t, err)
	require.True(t, ok)
}

var auditedOps = []auditedOp{
	{"ReclaimExpired", store.AuditExpiredReclaim, true, func(t *testing.T, s *mysqlstore.Store, db *sqlx.DB, kh string) func(*store.AuditEvent) (bool, error) {
		id, n := claimRow(t, s, kh)
		complete(t, s, id, n, store.RowSucceeded)
		age(t, db, kh, 2*time.Hour)
		return func(e *store.AuditEvent) (bool, error) {
			return s.Reclaim(t.Context(), store.ReclaimParams{Kind: store.ReclaimExpired, ID: id, OldNonce: n,
				OldAttempts: 1, NewNonce: newID(), Fingerprint: strings.Repeat("e", 64), TTL: time.Hour,
				StaleAfter: time.Minute, Audit: e})
		}
	}},
	{"ReclaimStale", store.AuditTakeover, false, func(t *testing.T, s *mysqlstore.Store, db *sqlx.DB, kh string) func(*store.AuditEvent) (bool, error) {
		id, n := claimRow(t, s, kh)
		age(t, db, kh, 10*time.Minute)
		return func(e *store.AuditEvent) (bool, error) {
			return s.Reclaim(t.Context(), store.ReclaimParams{Kind: store.ReclaimStale, ID: id, OldNonce: n,
				OldAttempts: 1, NewNonce: newID(), StaleAfter: time.Minute, Lease: time.Minute, Audit: e})
		}
	}},
	{"ReclaimFailed", store.AuditRetried, false, func(t *testing.T, s *mysqlstore.Store, _ *sqlx.DB, kh string) func(*store.AuditEvent) (bool, error) {
		id, n := claimRow(t, s, kh)
		complete(t, s, id, n, store.RowFailed)
		return func(e *store.AuditEvent) (bool, error) {
			return s.Reclaim(t.Context(), store.ReclaimParams{Kind: store.ReclaimFailed, ID: id, OldNonce: n,
				OldAttempts: 1, NewNonce: newID(), TTL: time.Hour, MaxAttempts: 3, Audit: e})
		}
	}},
	{"Abandon", store.AuditAbandoned, false, func(t *testing.T, s *mysqlstore.Store, db *sqlx.DB, kh string) func(*store.AuditEvent) (bool, error) {
		id, n := claimRow(t, s, kh)
		age(t, db, kh, 10*time.Minute)
		return func(e *store.AuditEvent) (bool, error) {
			return s.Abandon(t.Context(), store.AbandonParams{ID: id, OldNonce: n, OldAttempts: 1,
				StaleAfter: time.Minute, Response: []byte(`{"ok":false}`), ResponseCode: 502, TTL: time.Hour, Audit: e})
		}
	}},
	{"ReleaseDelete", store.AuditReleased, true, func(t *testing.T, s *mysqlstore.Store, _ *sqlx.DB, kh string) func(*store.AuditEvent) (bool, error) {
		id, n := claimRow(t, s, kh)
		return func(e *store.AuditEvent) (bool, error) {
			return s.Release(t.Context(), store.ReleaseParams{ID: id, Nonce: n, Audit: e})
		}
	}},
	{"ReleaseRestore", store.AuditReleased, false, func(t *testing.T, s *mysqlstore.Store, _ *sqlx.DB, kh string) func(*store.AuditEvent) (bool, error) {
		id, n := claimRow(t, s, kh)
		complete(t, s, id, n, store.RowFailed)
		prev, err := s.Get(t.Context(), "acme", "s", kh)
		require.NoError(t, err)
		retry := newID()
		won, err := s.Reclaim(t.Context(), store.ReclaimParams{Kind: store.ReclaimFailed, ID: id, OldNonce: n,
			OldAttempts: 1, NewNonce: retry, TTL: time.Hour, MaxAttempts: 3})
		require.NoError(t, err)
		require.True(t, won)
		return func(e *store.AuditEvent) (bool, error) {
			return s.Release(t.Context(), store.ReleaseParams{ID: id, Nonce: retry, Prev: &prev, Audit: e})
		}
	}},
	{"RequestCancel", store.AuditCanceled, false, func(t *testing.T, s *mysqlstore.Store, _ *sqlx.DB, kh string) func(*store.AuditEvent) (bool, error) {
		id, n := claimRow(t, s, kh)
		return func(e *store.AuditEvent) (bool, error) {
			return s.RequestCancel(t.Context(), store.CancelParams{ID: id, Nonce: n, Audit: e})
		}
	}},
}

// killAt returns an audit hook that, at stage, kills the transaction's
// connection from another connection and waits until the server has
// dropped it, so that the transaction's next statement meets a dead
// connection: the crash of a service between its two statements.
func killAt(t *testing.T, db *sqlx.DB, at string, killed *int) func(context.Context, string, *sqlx.Tx) {
	return func(ctx context.Context, stage string, tx *sqlx.Tx) {
		if stage != at {
			return
		}
		var conn int64
		require.NoError(t, tx.GetContext(ctx, &conn, `SELECT CONNECTION_ID()`))
		_, err := db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", conn))
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, db.GetContext(ctx, &n, `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?`, conn))
			return n == 0
		}, 30*time.Second, 5*time.Millisecond, "the killed connection %d is still listed", conn)
		*killed++
	}
}

// tableDump renders every row of idempotency_keys, every column.
func tableDump(t *testing.T, db *sqlx.DB) string {
	t.Helper()
	rows, err := db.QueryxContext(t.Context(), `SELECT * FROM idempotency_keys ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		vals, err := rows.SliceScan()
		require.NoError(t, err)
		for _, v := range vals {
			if bs, ok := v.([]byte); ok {
				v = string(bs)
			}
			fmt.Fprintf(&b, "%v|", v)
		}
		b.WriteString("\n")
	}
	require.NoError(t, rows.Err())
	return b.String()
}

func auditIDs(t *testing.T, db *sqlx.DB) []string {
	t.Helper()
	var ids []string
	require.NoError(t, db.SelectContext(t.Context(), &ids, `SELECT event_id FROM idempotency_audit ORDER BY event_id`))
	return ids
}

// An audited write is one transaction: a connection killed between the row
// statement and the event's INSERT, or between the INSERT and the COMMIT,
// leaves neither the row change nor the event (nor, for a write that
// overwrites or deletes the row, the claimed event it moved off the row),
// and the caller is told the outcome is unknown (it re-reads the row,
// which shows the truth). The same write then commits both. Moving the
// event's INSERT out of the transaction (running it on s.db) leaves the
// event of a change that never happened: the test fails.
func TestAuditedWriteIsAtomic(t *testing.T) {
	t.Parallel()
	for _, op := range auditedOps {
		t.Run(op.name, func(t *testing.T) {
			t.Parallel()
			d := testdb.New(t)
			s := mysqlstore.New(d.DB)
			kh := fmt.Sprintf("%064x", len(op.name))
			write := op.setup(t, s, d.DB, kh)
			event := func() *store.AuditEvent {
				return &store.AuditEvent{ID: newID(), Kind: op.kind, At: time.Now().Add(-time.Second), Tenant: "acme",
					Scope: "s", KeyHash: kh, Attempt: 2, Actor: "h:ops", StopReason: sanitize.StopReason("abandoned")}
			}

			for _, stage := range []string{"row", "commit"} {
				before := tableDump(t, d.DB)
				killed := 0
				mysqlstore.OnAuditTx(s, killAt(t, d.DB, stage, &killed))
				won, err := write(event())
				mysqlstore.OnAuditTx(s, nil)
				require.Equal(t, 1, killed, "stage %s: the hook ran", stage)
				t.Logf("killed at %s: %v", stage, err)
				require.ErrorIs(t, err, store.ErrOutcomeUnknown, "stage %s", stage)
				require.False(t, won)
				require.Equal(t, before, tableDump(t, d.DB), "stage %s: the row change was rolled back with the event", stage)
				require.Empty(t, auditIDs(t, d.DB), "stage %s: the event was rolled back with the row change", stage)
			}

			before := tableDump(t, d.DB)
			e := event()
			stages := 0
			mysqlstore.OnAuditTx(s, func(context.Context, string, *sqlx.Tx) { stages++ })
			won, err := write(e)
			require.NoError(t, err)
			require.True(t, won)
			require.Equal(t, 2, stages)
			require.NotEqual(t, before, tableDump(t, d.DB), "the row changed")
			want := []string{e.ID}
			if op.moves {
				want = append(want, claimID(kh))
			}
			require.ElementsMatch(t, want, auditIDs(t, d.DB), "with its event")
			h, err := s.History(t.Context(), "acme", "s", []string{kh}, 10)
			require.NoError(t, err)
			stored := *e
			stored.At = stored.At.UTC().Truncate(time.Microsecond)
			require.Contains(t, h, stored)
			require.Len(t, h, 2, "the event and the claim, carried or moved: once")
			require.ElementsMatch(t, []string{e.ID, claimID(kh)}, []string{h[0].ID, h[1].ID})
		})
	}
}

// Without an event a write is what it always was: one autocommit
// statement, no transaction (the hook that runs inside every audited
// transaction never runs).
func TestUnauditedWriteOpensNoTransaction(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	s := mysqlstore.New(d.DB)
	mysqlstore.OnAuditTx(s, func(_ context.Context, stage string, _ *sqlx.Tx) {
		t.Errorf("an unaudited write ran the audited transaction (stage %s)", stage)
	})
	for i, op := range auditedOps {
		write := op.setup(t, s, d.DB, fmt.Sprintf("%064x", i))
		won, err := write(nil)
		require.NoError(t, err, op.name)
		require.True(t, won, op.name)
	}
	require.Empty(t, auditIDs(t, d.DB))
}

// A claim's event is carried by its row: the audited claim is the same one
// autocommit INSERT as the plain claim (no transaction: the hook that runs
// inside every audited transaction never runs), so the row and its event
// are stored both or neither by construction, and idempotency_audit gets
// no row. History reads the event from the row, dated by created_at.
func TestAuditedClaimIsOneStatement(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	s := mysqlstore.New(d.DB)
	mysqlstore.OnAuditTx(s, func(_ context.Context, stage string, _ *sqlx.Tx) {
		t.Errorf("an audited claim ran a transaction (stage %s)", stage)
	})
	kh := strings.Repeat("d", 64)
	claimRow(t, s, kh)
	require.Empty(t, auditIDs(t, d.DB))
	var carried struct {
		ID      string    `db:"claim_event_id"`
		By      string    `db:"claimed_by"`
		Created time.Time `db:"created_at"`
	}
	require.NoError(t, d.DB.GetContext(t.Context(), &carried,
		`SELECT claim_event_id, claimed_by, created_at FROM idempotency_keys WHERE key_hash = ?`, kh))
	require.Equal(t, claimID(kh), carried.ID)
	require.Equal(t, "key:claimer", carried.By)
	h, err := s.History(t.Context(), "acme", "s", []string{kh}, 10)
	require.NoError(t, err)
	require.Equal(t, []store.AuditEvent{{ID: claimID(kh), Kind: store.AuditClaimed, At: carried.Created.UTC(),
		Tenant: "acme", Scope: "s", KeyHash: kh, Attempt: 1, Actor: "key:claimer"}}, h)
}

// Batches retried over each other (the same events, from several writers
// at once, some of them stored already): every call succeeds, and every
// event is stored once, with no UPDATE (the service's user has none on
// idempotency_audit).
func TestConcurrentOverlappingAppendsStoreEachEventOnce(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	s := mysqlstore.New(d.DB)
	kh := strings.Repeat("c", 64)
	events := make([]store.AuditEvent, 300)
	for i := range events {
		events[i] = store.AuditEvent{ID: fmt.Sprintf("%032x", i), Kind: store.AuditTakeover,
			At: time.Now().Add(time.Duration(i) * time.Microsecond), Tenant: "acme", Scope: "s", KeyHash: kh, Attempt: 1}
	}
	require.NoError(t, s.AppendAudit(t.Context(), events[100:150]))
	errs := make(chan error, 6)
	for w := range 6 {
		go func() { errs <- s.AppendAudit(t.Context(), events[w*20:]) }()
	}
	for range 6 {
		require.NoError(t, <-errs)
	}
	var n, distinct int
	require.NoError(t, d.DB.GetContext(t.Context(), &n, `SELECT COUNT(*) FROM idempotency_audit`))
	require.NoError(t, d.DB.GetContext(t.Context(), &distinct, `SELECT COUNT(DISTINCT event_id) FROM idempotency_audit`))
	require.Equal(t, 300, n)
	require.Equal(t, 300, distinct)
}

// Writers adding to the same tallies at once (several replicas' batch writers during one retry
// storm) lose no count and add no row: each tally is one row holding every event, its first and
// last time the earliest and latest of all writers'. A batch that deadlocks is rolled back whole
// and run again (appendTallies); a count read and written back by each writer would lose some.
func TestConcurrentTalliesCountEveryEvent(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	s := mysqlstore.New(d.DB)
	base := time.Date(2026, 8, 1, 0, 0, 0, 0, time.UTC)
	const writers, batches, perBatch = 6, 20, 50
	errs := make(chan error, writers)
	for w := range writers {
		go func() {
			for b := range batches {
				events := make([]store.AuditEvent, perBatch)
				for i := range events {
					n := (w*batches+b)*perBatch + i
					events[i] = store.AuditEvent{ID: fmt.Sprintf("%032x", n), Kind: store.AuditReplay,
						At: base.Add(time.Duration(n) * time.Millisecond), Tenant: "acme", Scope: "s",
						KeyHash: strings.Repeat(string(rune('a'+i%3)), 64), Attempt: 1, Actor: fmt.Sprintf("key:%d", (i+w)%2)}
				}
				if err := s.AppendAudit(t.Context(), events); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range writers {
		require.NoError(t, <-errs)
	}
	var rows []struct {
		N     int64     `db:"n"`
		First time.Time `db:"first_at"`
		Last  time.Time `db:"last_at"`
		ID    string    `db:"event_id"`
	}
	require.NoError(t, d.DB.SelectContext(t.Context(), &rows, `SELECT n, first_at, last_at, event_id FROM idempotency_audit_tally`))
	require.Len(t, rows, 3*2, "one tally per key and actor")
	var total int64
	first, last := rows[0].First, rows[0].Last
	for _, r := range rows {
		total += r.N
		if r.First.Before(first) {
			first = r.First
		}
		if r.Last.After(last) {
			last = r.Last
		}
	}
	require.EqualValues(t, writers*batches*perBatch, total)
	require.True(t, first.Equal(base), "the earliest event is some tally's first: %s", first)
	require.True(t, last.Equal(base.Add((writers*batches*perBatch-1)*time.Millisecond)), "the latest is some tally's last: %s", last)
	var none int
	require.NoError(t, d.DB.GetContext(t.Context(), &none, `SELECT COUNT(*) FROM idempotency_audit`))
	require.Zero(t, none, "no replay is a row of its own")
}

// Callers racing to re-claim one expired key whose row carries its claim's event (a storm on an
// expired key, the trail on) get one winner and no error: each locks the row before it reads
// the event to move, so none holds a shared lock that another's UPDATE waits for while it waits
// for theirs (a deadlock, an unknown outcome the engine would pay a re-read for). The winner
// moved the old claim's event once.
func TestExpiredReclaimRaceMovesTheClaimOnceWithoutDeadlocks(t *testing.T) {
	t.Parallel()
	d := testdb.New(t)
	s := mysqlstore.New(d.DB)
	kh := strings.Repeat("e", 64)
	id, n := claimRow(t, s, kh)
	complete(t, s, id, n, store.RowSucceeded)
	age(t, d.DB, kh, 2*time.Hour)
	const racers = 12
	type outcome struct {
		won bool
		err error
	}
	out := make(chan outcome, racers)
	start := make(chan struct{})
	for range racers {
		go func() {
			<-start
			won, err := s.Reclaim(t.Context(), store.ReclaimParams{Kind: store.ReclaimExpired, ID: id, OldNonce: n,
				OldAttempts: 1, NewNonce: newID(), Fingerprint: strings.Repeat("e", 64), TTL: time.Hour,
				StaleAfter: time.Minute, Audit: &store.AuditEvent{ID: newID(), Kind: store.AuditExpiredReclaim,
					At: time.Now(), Tenant: "acme", Scope: "s", KeyHash: kh, Attempt: 1}})
			out <- outcome{won, err}
		}()
	}
	close(start)
	wins := 0
	for range racers {
		o := <-out
		require.NoError(t, o.err)
		if o.won {
			wins++
		}
	}
	require.Equal(t, 1, wins)
	ids := auditIDs(t, d.DB)
	require.Len(t, ids, 2, "the old claim and the one re-claim")
	require.Contains(t, ids, claimID(kh))
}
