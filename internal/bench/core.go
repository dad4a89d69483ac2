package main

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/idemguardtest"
	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/tenancy"
)

// The two core suites compare Do with the least SQL the
// protocol needs for the same outcome (the "raw floor"):
//
//   - fresh (write path): a new key is one claim INSERT of a started row and
//     one nonce-guarded UPDATE to succeeded. The raw case runs exactly those
//     two statements (same columns, same shape as mysqlstore's Claim and
//     Complete) with plain ExecContext; the guard case runs Do
//     with a no-op operation on a fresh client key.
//   - replay (read path): a known key is one SELECT by the unique key
//     (tenant, scope, key_hash) with mysqlstore.Get's column list. The guard
//     runs Do on keys that already succeeded, once with the
//     replay cache (the default) and once with ReplayCacheSize -1, which
//     answers every replay from the store.
//
// Raw and guarded cases share one pool (mysqlconn.Open, same normalized DSN
// and size) and write rows of the same size to the same table: the raw
// floor uses random key hashes, fingerprints and nonces like the guard (a
// sequential key would insert at the right edge of the unique index, a
// cheaper write than the guard's random HMACs), and stores the same envelope
// bytes the guard stores. What the ratio measures is the guard's own cost:
// validation, canonical inputs and HMACs, contexts, the heartbeat, envelope
// sanitizing and encoding, result building.

func init() {
	register(suite{name: "fresh", about: "write path: raw INSERT+guarded UPDATE vs Do on fresh keys", run: runFresh})
	register(suite{name: "replay", about: "read path: raw SELECT by unique key vs Do replays (cached and store-only)", run: runReplay})
}

// targetRatio is the least guard/raw throughput ratio at concurrency 16 for
// cached replays against the raw SELECT.
const targetRatio = 0.85

// uncachedTarget is the least guard/raw throughput ratio at concurrency 16
// for the paths no replay cache helps: fresh keys against their floor, and
// store-only replays (replay cache off, read-first by default) against the
// raw SELECT.
const uncachedTarget = 0.9

// replayKeys is how many succeeded keys the replay suite cycles through.
const replayKeys = 1000

const (
	tenantRaw   = tenancy.ID("bench-raw")
	tenantGuard = tenancy.ID("bench-guard")
	scopeFresh  = "bench.fresh"
	scopeReplay = "bench.replay"
	benchTTL    = idemguard.DefaultTTL
)

// The floor: the least SQL the protocol needs, written out here on purpose
// rather than taken from the MySQL store's statements (internal/mysqlstore,
// where every other statement on the tables lives). It is what the store is
// measured against: the store's claimSQL, completeSQL and getSQL carry more
// (secret_id, lease_micros, response_events, completed_at returned in the OK
// packet), and that cost belongs to the side being measured; a floor that
// moved with the store would hide it. Keep the shape (one INSERT, one
// nonce-guarded UPDATE, one SELECT by the unique key) in step with the
// protocol, not with the store's text.
const (
	rawClaimSQL = `INSERT INTO idempotency_keys
  (tenant, scope, key_hash, request_fingerprint, status, attempt_count, claim_nonce,
   created_at, started_at, heartbeat_at, expires_at)
VALUES (?, ?, ?, ?, 'started', 1, ?,
   UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)`

	rawCompleteSQL = `UPDATE idempotency_keys SET
  status = ?, response_json = ?, response_code = ?,
  completed_at = UTC_TIMESTAMP(6), expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE id = ? AND status = 'started' AND claim_nonce = ?`

	rawGetSQL = `SELECT id, tenant, scope, key_hash, request_fingerprint, status, attempt_count, claim_nonce,
  response_json, response_code, created_at, started_at, heartbeat_at, completed_at, expires_at,
  UTC_TIMESTAMP(6) AS db_now
FROM idempotency_keys WHERE tenant = ? AND scope = ? AND key_hash = ?`
)

// opValue is what the no-op operation returns: a small envelope.
var opValue = map[string]any{"ok": true, "traceId": "bench-trace", "data": map[string]any{"n": 1, "label": "bench"}}

func noop(context.Context) (any, error) { return opValue, nil }

// inputs are a typical small operation input: an id and a hashed text.
type inputs struct {
	Doc  int64  `json:"doc"`
	Text string `json:"text"`
}

var textHash = keys.HashUserText("a prompt the caller never stores")

// storedBody is the response_json the guard stores for opValue, so that the
// raw floor writes the same bytes.
func storedBody() ([]byte, error) {
	env, err := sanitize.FromValue(opValue)
	if err != nil {
		return nil, err
	}
	return sanitize.Policy{}.Encode(env)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = crand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}

// rawInsertUpdate is the raw durable floor of a fresh key: the claim's
// INSERT, then the nonce-guarded UPDATE that stores body, on random hashes
// and nonces in scope (tenantRaw).
func rawInsertUpdate(e *env, scope string, body []byte) func(context.Context) error {
	return insertUpdate(
		func(ctx context.Context, args ...any) (sql.Result, error) {
			return e.db.ExecContext(ctx, rawClaimSQL, args...)
		},
		func(ctx context.Context, args ...any) (sql.Result, error) {
			return e.db.ExecContext(ctx, rawCompleteSQL, args...)
		},
		scope, body)
}

// rawInsertUpdatePrepared is rawInsertUpdate with both statements
// prepared on the server (the pool's connections prepare each once), as
// the MySQL store runs its claim and completion: the floor of the same
// protocol, reported beside the text floor; release closes them.
func rawInsertUpdatePrepared(ctx context.Context, e *env, scope string, body []byte) (op func(context.Context) error, release func(), err error) {
	claim, err := e.db.PrepareContext(ctx, rawClaimSQL)
	if err != nil {
		return nil, nil, err
	}
	complete, err := e.db.PrepareContext(ctx, rawCompleteSQL)
	if err != nil {
		_ = claim.Close()
		return nil, nil, err
	}
	return insertUpdate(claim.ExecContext, complete.ExecContext, scope, body), func() { _ = claim.Close(); _ = complete.Close() }, nil
}

// insertUpdate is the raw floor's fresh key, its claim (rawClaimSQL) and
// its completion (rawCompleteSQL) sent by the given functions.
func insertUpdate(claim, complete func(context.Context, ...any) (sql.Result, error), scope string, body []byte) func(context.Context) error {
	ttl := benchTTL.Microseconds()
	return func(ctx context.Context) error {
		nonce := randomHex(16)
		res, err := claim(ctx, string(tenantRaw), scope, randomHex(32), randomHex(32), nonce, ttl)
		if err != nil {
			return fmt.Errorf("claim insert: %w", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		res, err = complete(ctx, string(store.RowSucceeded), string(body), 200, ttl, id, nonce)
		if err != nil {
			return fmt.Errorf("complete update: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			return fmt.Errorf("complete update changed %d rows (err %v), want 1", n, err)
		}
		return nil
	}
}

func runFresh(ctx context.Context, e *env) ([]row, error) {
	g, err := e.newGuard(nil)
	if err != nil {
		return nil, err
	}
	defer closeGuard(g)
	body, err := storedBody()
	if err != nil {
		return nil, err
	}

	raw := benchCase{name: "raw-insert-update", op: rawInsertUpdate(e, scopeFresh, body)}

	// readFirst reads before every claim (idemguardtest.ReadFirstAlways; the same
	// as ReadFirstClientKey here, where every call has a client key): what a
	// fresh key pays when the guard reads first.
	readFirst, err := e.newGuard(func(c *idemguard.Config) { idemguardtest.SetReadFirst(c, idemguardtest.ReadFirstAlways) })
	if err != nil {
		return nil, err
	}
	defer closeGuard(readFirst)
	var seq atomic.Int64
	fresh := func(name string, g *idemguard.Guard, target float64) benchCase {
		return benchCase{name: name, baseline: raw.name, targetRatio: target, op: freshDo(g, scopeFresh, "fresh-", &seq)}
	}
	// The default configuration (adaptive read-first) must meet the target.
	guard := fresh("guard-fresh", g, uncachedTarget)
	guardRF := fresh("guard-fresh-read-first", readFirst, 0)

	var rows []row
	for _, c := range e.opts.concurrency {
		r, err := e.compare(ctx, "fresh", c, raw, guard, guardRF)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// rawRow is what the raw SELECT scans: mysqlstore.Get's columns.
type rawRow struct {
	id                         uint64
	tenant, scope, keyHash, fp string
	status                     string
	attempts                   int
	nonce                      string
	response                   []byte
	code                       sql.NullInt32
	created, started           time.Time
	heartbeat, completed       sql.NullTime
	expires, now               time.Time
}

func runReplay(ctx context.Context, e *env) ([]row, error) {
	hashes, err := populateReplays(ctx, e)
	if err != nil {
		return nil, err
	}
	cached, err := e.newGuard(nil)
	if err != nil {
		return nil, err
	}
	defer closeGuard(cached)
	storeOnly, err := e.newGuard(func(c *idemguard.Config) { c.ReplayCacheSize = -1 })
	if err != nil {
		return nil, err
	}
	defer closeGuard(storeOnly)
	// claimFirst is the store path without read-first: INSERT (1062), SELECT.
	claimFirst, err := e.newGuard(func(c *idemguard.Config) {
		c.ReplayCacheSize = -1
		idemguardtest.SetReadFirst(c, idemguardtest.ReadFirstNever)
	})
	if err != nil {
		return nil, err
	}
	defer closeGuard(claimFirst)

	var rawSeq atomic.Int64
	raw := benchCase{name: "raw-select", op: func(ctx context.Context) error {
		return selectRow(ctx, e, hashes[int(rawSeq.Add(1)%replayKeys)])
	}}
	// What a replay the cache cannot answer costs in SQL: the claim INSERT
	// runs first (a fresh key is owned only by winning it, never by what a
	// read saw), fails with 1062, and the row is read.
	var dupSeq atomic.Int64
	rawDup := benchCase{name: "raw-dup-insert-select", baseline: raw.name, op: func(ctx context.Context) error {
		h := hashes[int(dupSeq.Add(1)%replayKeys)]
		_, err := e.db.ExecContext(ctx, rawClaimSQL, string(tenantGuard), scopeReplay, h, randomHex(32), randomHex(16),
			benchTTL.Microseconds())
		if me := (*mysql.MySQLError)(nil); !errors.As(err, &me) || me.Number != 1062 {
			return fmt.Errorf("claim insert of an existing key: got %v, want error 1062", err)
		}
		return selectRow(ctx, e, h)
	}}

	replay := func(name string, g *idemguard.Guard, target float64) benchCase {
		var seq atomic.Int64
		return benchCase{name: name, baseline: raw.name, targetRatio: target, op: func(ctx context.Context) error {
			n := seq.Add(1) % replayKeys
			res, err := g.Do(ctx, replayCall(n), noop)
			if err != nil {
				return err
			}
			if res.Status != idemguard.StatusSucceeded || !res.Cached {
				return fmt.Errorf("succeeded key answered status %s cached %t, want a replay", res.Status, res.Cached)
			}
			return nil
		}}
	}
	// The default configuration must meet the target; store-only shows what
	// the cache buys.
	withCache := replay("guard-replay-cached", cached, targetRatio)
	noCache := replay("guard-replay-store", storeOnly, uncachedTarget)
	noCacheClaimFirst := replay("guard-replay-store-claim-first", claimFirst, 0)

	var rows []row
	for _, c := range e.opts.concurrency {
		r, err := e.compare(ctx, "replay", c, raw, withCache, noCache, noCacheClaimFirst, rawDup)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// selectRow reads the replay row with key hash h, as mysqlstore.Get does,
// with plain database/sql scanning.
func selectRow(ctx context.Context, e *env, h string) error {
	var r rawRow
	err := e.db.QueryRowContext(ctx, rawGetSQL, string(tenantGuard), scopeReplay, h).Scan(&r.id, &r.tenant, &r.scope,
		&r.keyHash, &r.fp, &r.status, &r.attempts, &r.nonce, &r.response, &r.code, &r.created, &r.started,
		&r.heartbeat, &r.completed, &r.expires, &r.now)
	if err != nil {
		return fmt.Errorf("select: %w", err)
	}
	if r.status != string(store.RowSucceeded) {
		return fmt.Errorf("select found status %s, want succeeded", r.status)
	}
	return nil
}

func replayCall(n int64) idemguard.Call {
	return idemguard.Call{Tenant: tenantGuard, Scope: scopeReplay, ClientKey: "replay-" + strconv.FormatInt(n, 10),
		Inputs: inputs{Doc: n, Text: textHash}}
}

// populateReplays populates the replay suite's keys.
func populateReplays(ctx context.Context, e *env) ([]string, error) {
	return populate(ctx, e, replayKeys, replayCall)
}

// populate runs the operation once for each of n calls (through a guard of
// its own, so no measured guard starts with a warm cache) and returns the
// key hashes by call number.
func populate(ctx context.Context, e *env, replayKeys int64, replayCall func(int64) idemguard.Call) ([]string, error) {
	g, err := e.newGuard(func(c *idemguard.Config) { c.ReplayCacheSize = -1 })
	if err != nil {
		return nil, err
	}
	defer closeGuard(g)
	hashes := make([]string, replayKeys)
	err = forEachKey(ctx, replayKeys, func(n int64) error {
		res, err := g.Do(ctx, replayCall(n), noop)
		if err == nil && (res.Status != idemguard.StatusSucceeded || res.Cached) {
			err = fmt.Errorf("status %s cached %t, want a fresh success", res.Status, res.Cached)
		}
		if err != nil {
			return fmt.Errorf("populate replay key %d: %w", n, err)
		}
		hashes[n] = res.KeyHash
		return nil
	})
	if err != nil {
		return nil, err
	}
	return hashes, nil
}

// forEachKey calls do for 0..keys-1 from 16 workers and stops at the first
// error, which it returns (else the context's error, if it ended).
func forEachKey(ctx context.Context, keys int64, do func(n int64) error) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		next     atomic.Int64
	)
	for range 16 {
		wg.Go(func() {
			for {
				n := next.Add(1) - 1
				if n >= keys || ctx.Err() != nil {
					return
				}
				if err := do(n); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// freshDo calls Do on g with a new client key (prefix and the next of seq)
// and a no-op operation, and fails unless the call ran fresh and succeeded.
func freshDo(g *idemguard.Guard, scope, prefix string, seq *atomic.Int64) func(context.Context) error {
	return func(ctx context.Context) error {
		n := seq.Add(1)
		res, err := g.Do(ctx, idemguard.Call{Tenant: tenantGuard, Scope: scope,
			ClientKey: prefix + strconv.FormatInt(n, 10), Inputs: inputs{Doc: n, Text: textHash}}, noop)
		if err != nil {
			return err
		}
		if res.Status != idemguard.StatusSucceeded || res.Cached || res.LostClaim {
			return fmt.Errorf("fresh key answered status %s cached %t lost %t, want a fresh success",
				res.Status, res.Cached, res.LostClaim)
		}
		return nil
	}
}

func closeGuard(g *idemguard.Guard) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = g.Close(ctx)
}
