package mysqlstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/store"
)

// sessionCounter reads a counter of the session of db's one connection.
func sessionCounter(t *testing.T, db *testdb.Database, name string) int {
	t.Helper()
	var (
		got string
		n   int
	)
	// SHOW, not information_schema.SESSION_STATUS: MySQL 8 has no such table.
	require.NoError(t, db.DB.QueryRowContext(context.Background(), `SHOW SESSION STATUS LIKE '`+name+`'`).Scan(&got, &n))
	return n
}

// A fresh key's claim and completion (with or without the progress a
// streamed operation reports), and the read of one key, are prepared on
// the server once per connection and executed as prepared statements
// (binary protocol) from then on.
func TestFreshKeysRunPreparedStatements(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	db.DB.SetMaxOpenConns(1) // one session, whose counters are this test's alone
	s := mysqlstore.New(db.DB)
	ctx := context.Background()
	prepares, executes := sessionCounter(t, db, "Com_stmt_prepare"), sessionCounter(t, db, "Com_stmt_execute")
	const keys = 3
	for i := range keys {
		key, nonce := strings.Repeat(string(rune('a'+i)), 64), strings.Repeat("ab", 16)
		id, err := s.Claim(ctx, store.ClaimParams{Tenant: "acme", Scope: "s", KeyHash: key,
			Fingerprint: strings.Repeat("d", 64), Nonce: nonce, TTL: time.Hour, Lease: time.Minute})
		require.NoError(t, err)
		complete := store.CompleteParams{ID: id, Nonce: nonce, Status: store.RowSucceeded,
			Response: []byte(`{"ok":true}`), ResponseCode: 200, TTL: time.Hour}
		if i%2 == 1 { // as a stream completes: with its last progress
			complete.Progress = &store.Progress{Done: int64(i)}
		}
		ok, _, err := s.Complete(ctx, complete)
		require.NoError(t, err)
		require.True(t, ok)
		rec, err := s.Get(ctx, "acme", "s", key)
		require.NoError(t, err)
		require.Equal(t, store.RowSucceeded, rec.Status)
		require.JSONEq(t, `{"ok":true}`, string(rec.Response))
	}
	require.Equal(t, 4, sessionCounter(t, db, "Com_stmt_prepare")-prepares,
		"the claim, the two completions and the read, each prepared once")
	require.Equal(t, 3*keys, sessionCounter(t, db, "Com_stmt_execute")-executes)
}

// A prepared claim whose statement the server no longer knows: the fault
// proxy sends its execution under a statement id the server never gave,
// and the real server answers 1243 and runs nothing. The connection is
// given up as not sent, database/sql sends the claim again on another one,
// which prepares it anew, and the claim lands once.
func TestLostStatementOnTheServerIsSentAgain(t *testing.T) {
	t.Parallel()
	b := newNotSentBench(t) // a pool of one connection
	ctx := context.Background()
	_, err := b.st.Claim(ctx, claimParams("first")) // the connection prepares the claim
	require.NoError(t, err)

	b.proxy.LoseStatement("INSERT INTO idempotency_keys")
	_, err = b.st.Claim(ctx, claimParams("second"))
	require.NoError(t, err)
	require.Equal(t, []uint16{1243}, b.proxy.SpoiledReplies(), "the server refused the execution it did not know")
	require.Equal(t, 1, rowCount(t, b.db, "second"))
}

// A claim the server refuses to prepare (the fault proxy spoils the
// prepare's text; the real server answers with an error, as one that
// refuses prepared statements does): the claim goes as text on that
// connection, lands once, and the connection does not ask again.
func TestRefusedPrepareOnTheServerSendsTheText(t *testing.T) {
	t.Parallel()
	b := newNotSentBench(t) // a pool of one connection
	ctx := context.Background()
	const claim = "INSERT INTO idempotency_keys"
	b.proxy.RefusePrepare(claim)
	_, err := b.st.Claim(ctx, claimParams("first"))
	require.NoError(t, err)
	require.Equal(t, []uint16{1064}, b.proxy.SpoiledReplies(), "the server refused to prepare the claim")
	_, err = b.st.Claim(ctx, claimParams("second"))
	require.NoError(t, err)
	require.Equal(t, 1, rowCount(t, b.db, "first"))
	require.Equal(t, 1, rowCount(t, b.db, "second"))
	require.Equal(t, 1, b.proxy.Prepares(claim), "the connection asked the server to prepare the claim again")
}
