package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/keys"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/routers/auth"
)

// auditLine is one line of serve's JSON-lines audit stream.
type auditLine struct {
	ID         string     `json:"id"`
	Kind       string     `json:"kind"`
	Tenant     string     `json:"tenant"`
	Scope      string     `json:"scope"`
	KeyPrefix  string     `json:"keyPrefix"`
	Attempt    int        `json:"attempt"`
	Actor      string     `json:"actor"`
	OriginalAt *time.Time `json:"originalAt"`
	Replay     int        `json:"replay"`
	Count      int        `json:"count"`
	At         time.Time  `json:"at"`
	LastAt     *time.Time `json:"lastAt"`
}

// tableEvent is one entry of a key's trail as the database keeps it: a row of idempotency_audit,
// a tally of idempotency_audit_tally (N events), or the claim event a key's row carries.
type tableEvent struct {
	ID      string `db:"event_id"`
	Kind    string `db:"kind"`
	KeyHash string `db:"key_hash"`
	Attempt int    `db:"attempt"`
	Actor   string `db:"actor"`
	N       int    `db:"n"`
}

func readStream(t *testing.T, path string) []auditLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out []auditLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var e auditLine
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), "audit stream line %q", sc.Text())
		out = append(out, e)
	}
	return out
}

func streamOfKey(events []auditLine, keyHash string) []auditLine {
	var out []auditLine
	for _, e := range events {
		if strings.HasPrefix(keyHash, e.KeyPrefix) && len(e.KeyPrefix) == 16 {
			out = append(out, e)
		}
	}
	return out
}

func tableOfKey(t *testing.T, db *testdb.Database, keyHash string) []tableEvent {
	t.Helper()
	var out []tableEvent
	require.NoError(t, db.DB.Select(&out, `SELECT event_id, kind, key_hash, attempt, actor, n FROM (
  SELECT event_id, kind, at, key_hash, attempt, actor, 1 AS n FROM idempotency_audit WHERE key_hash = ?
  UNION ALL
  SELECT event_id, kind, first_at, key_hash, attempt, actor, n FROM idempotency_audit_tally WHERE key_hash = ?
  UNION ALL
  SELECT claim_event_id, 'claimed', created_at, key_hash, 1, claimed_by, 1 FROM idempotency_keys
  WHERE key_hash = ? AND claim_event_id IS NOT NULL) AS trail ORDER BY at, event_id`, keyHash, keyHash, keyHash))
	return out
}

// countKinds counts events by kind; weight is how many events one entry stands for.
func countKinds[E any](events []E, kind func(E) string, weight func(E) int) map[string]int {
	out := map[string]int{}
	for _, e := range events {
		out[kind(e)] += weight(e)
	}
	return out
}

func one[E any](E) int { return 1 }

func sortedIDs[E any](events []E, id func(E) string) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = id(e)
	}
	slices.Sort(out)
	return out
}

// TestAuditTrailOfAStormAConflictAReplayAndATakeover: through serve on MariaDB, a storm of
// twenty identical requests, a replay, a conflict, and a takeover after kill -9 leave exactly
// their events: each process's JSON-lines stream has one line per event; the database has the
// durable ones by id (the claim on the key's row) and the others counted per actor, each count's
// id one the stream showed; the history route answers them to the key's tenant only; and no
// canary (client key, prompt, API key) appears in the tables, a stream or the history.
func TestAuditTrailOfAStormAConflictAReplayAndATakeover(t *testing.T) {
	t.Parallel()
	db, c, llm := database(t), newClient(t), newFakeLLM(t)
	const canaryKey = "canary-key-5e1f9a"
	const canaryPrompt = "canary prompt 7c2b: card 4111 1111 1111 1111"
	const stormBody = `{"messages":[{"role":"user","content":"` + canaryPrompt + `"}],"max_tokens":16}`
	const otherBody = `{"messages":[{"role":"user","content":"another prompt"}],"max_tokens":16}`
	const slowBody = `{"messages":[{"role":"user","content":"slow"}],"max_tokens":16}`
	d, err := keys.New([]byte(secret))
	require.NoError(t, err)
	stormHash := d.KeyHash("acme", "chat", canaryKey, nil)
	takeoverHash := d.KeyHash("acme", "slow", "takeover-1", nil)

	// The upstream's calls in order: the storm's one execution waits for the test; the
	// takeover key's first execution hangs until its process dies; later ones answer.
	release, slowHeld := make(chan struct{}), make(chan struct{})
	llm.set(func(n int32, w http.ResponseWriter, r *http.Request) {
		switch n {
		case 1:
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		case 2:
			close(slowHeld)
			<-r.Context().Done()
			return
		}
		complete(w, n)
	})
	cfg := chatConfig(llm, "  - {name: chat, operation: openai_chat}\n  - {name: slow, operation: openai_chat, stale_after: 1s}\n", "")
	dir := t.TempDir()
	envA, envB := productionEnv(db.DSN), productionEnv(db.DSN)
	streamA, streamB := filepath.Join(dir, "audit-a.jsonl"), filepath.Join(dir, "audit-b.jsonl")
	envA["IDEMGUARD_AUDIT_LOG"], envB["IDEMGUARD_AUDIT_LOG"] = streamA, streamB
	for _, env := range []map[string]string{envA, envB} { // acme's key is named: the actor is key:billing
		env["IDEMGUARD_API_KEYS"] = "acme:billing=" + auth.HashAPIKey(acmeKey) + ",globex:" + auth.HashAPIKey(globexKey)
	}
	a := startService(t, envA, cfg)

	// The storm: one execution, nineteen told it runs (409).
	answers := make(chan answer, 20)
	for range 20 {
		go func() {
			ans, err := tryDo(c, a, request{path: "/v1/ops/chat", apiKey: acmeKey, key: canaryKey, body: stormBody})
			if err != nil {
				ans = answer{status: -1, body: []byte(err.Error())}
			}
			answers <- ans
		}()
	}
	var first answer
	for i := range 20 {
		if i == 19 {
			close(release) // the nineteen duplicates have their 409s: let the execution finish
		}
		ans := <-answers
		switch ans.status {
		case http.StatusConflict:
			requireProblem(t, ans, http.StatusConflict, "in_progress")
		case http.StatusOK:
			first = ans
		default:
			t.Fatalf("storm answer %s", ans)
		}
	}
	requireEnvelope(t, first)
	requireReplayOf(t, first, post(t, c, a, "chat", acmeKey, canaryKey, stormBody))
	requireProblem(t, post(t, c, a, "chat", acmeKey, canaryKey, otherBody), http.StatusUnprocessableEntity, "")

	stormWant := map[string]int{"claimed": 1, "in_progress": 19, "replay": 1, "conflict": 1}
	kindOf, weight := func(e tableEvent) string { return e.Kind }, func(e tableEvent) int { return e.N }
	var table []tableEvent
	eventually(t, 10*time.Second, "the storm's 22 events in the tables", func() bool {
		table = tableOfKey(t, db, stormHash)
		n := 0
		for _, e := range table {
			n += e.N
		}
		return n >= 22
	})
	require.Equal(t, stormWant, countKinds(table, kindOf, weight))
	require.Len(t, table, 4, "one entry per kind: the claim on its row, three counts")
	for _, e := range table {
		require.Equal(t, 1, e.Attempt)
		require.Equal(t, "key:billing", e.Actor)
	}
	var stream []auditLine
	eventually(t, 10*time.Second, "the storm's 22 events in process A's stream", func() bool {
		stream = streamOfKey(readStream(t, streamA), stormHash)
		return len(stream) >= 22
	})
	require.Equal(t, stormWant, countKinds(stream, func(e auditLine) string { return e.Kind }, one[auditLine]), "one line per event")
	require.Subset(t, sortedIDs(stream, func(e auditLine) string { return e.ID }),
		sortedIDs(table, func(e tableEvent) string { return e.ID }), "each entry's id is one the stream showed")
	for _, e := range stream {
		if e.Kind == "replay" {
			require.NotNil(t, e.OriginalAt, "a replay names when its answer was stored")
		}
	}

	// The history: the key's tenant gets the events in order, another tenant a 404.
	hist := do(t, c, a, request{method: http.MethodGet, path: "/v1/ops/chat/keys/" + canaryKey + "/history", apiKey: acmeKey})
	require.Equal(t, http.StatusOK, hist.status, "history: %s", hist)
	var h struct {
		Events []auditLine `json:"events"`
	}
	require.NoError(t, json.Unmarshal(hist.body, &h))
	require.Len(t, h.Events, 4)
	require.Equal(t, "claimed", h.Events[0].Kind)
	require.Equal(t, stormWant, countKinds(h.Events, func(e auditLine) string { return e.Kind },
		func(e auditLine) int { return max(e.Count, 1) }))
	for _, e := range h.Events {
		if e.Kind == "replay" {
			require.Equal(t, 1, e.Replay, "the first replay is number 1")
		}
	}
	other := do(t, c, a, request{method: http.MethodGet, path: "/v1/ops/chat/keys/" + canaryKey + "/history", apiKey: globexKey})
	require.Equal(t, http.StatusNotFound, other.status, "another tenant's history: %s", other)

	// The takeover: process A dies (kill -9) while its execution hangs; B takes the key over.
	go func() {
		_, _ = tryDo(c, a, request{path: "/v1/ops/slow", apiKey: acmeKey, key: "takeover-1", body: slowBody})
	}()
	<-slowHeld
	eventually(t, 10*time.Second, "process A's stream shows its claim", func() bool {
		return len(streamOfKey(readStream(t, streamA), takeoverHash)) == 1
	})
	a.kill()
	b := startService(t, envB, cfg)
	ans := do(t, c, b, request{path: "/v1/ops/slow", apiKey: acmeKey, key: "takeover-1", body: slowBody,
		headers: [][2]string{{"Prefer", "wait=20"}}})
	requireEnvelope(t, ans)
	taken := tableOfKey(t, db, takeoverHash)
	require.Equal(t, []string{"claimed", "takeover"}, []string{taken[0].Kind, taken[1].Kind})
	require.Len(t, taken, 2)
	require.Equal(t, []int{1, 2}, []int{taken[0].Attempt, taken[1].Attempt})
	streamedA, streamedB := streamOfKey(readStream(t, streamA), takeoverHash), streamOfKey(readStream(t, streamB), takeoverHash)
	require.Len(t, streamedA, 1)
	require.Equal(t, taken[0].ID, streamedA[0].ID)
	eventually(t, 10*time.Second, "process B's stream shows the takeover", func() bool {
		streamedB = streamOfKey(readStream(t, streamB), takeoverHash)
		return len(streamedB) == 1
	})
	require.Equal(t, taken[1].ID, streamedB[0].ID)

	// No canary anywhere the trail is kept or shown.
	var dump []string
	require.NoError(t, db.DB.Select(&dump, `SELECT CONCAT_WS('|', event_id, kind, tenant, scope, key_hash, attempt, actor,
		COALESCE(stop_reason, ''), COALESCE(detail, '')) FROM idempotency_audit
		UNION ALL SELECT CONCAT_WS('|', event_id, kind, tenant, scope, key_hash, attempt, actor, detail)
		FROM idempotency_audit_tally
		UNION ALL SELECT CONCAT_WS('|', claim_event_id, claimed_by) FROM idempotency_keys`))
	streams := []string{strings.Join(dump, "\n"), string(hist.body)}
	for _, p := range []string{streamA, streamB} {
		s, err := os.ReadFile(p)
		require.NoError(t, err)
		streams = append(streams, string(s))
	}
	for i, s := range streams {
		require.NotEmpty(t, s)
		// The card as written ("4111" alone is four hex digits, which a random event id
		// holds now and then).
		for _, canary := range []string{canaryKey, "canary prompt", "4111 1111", acmeKey, secret, model} {
			require.NotContains(t, s, canary, "sink %d", i)
		}
	}
}

// auditFootprint is what the audit tables hold: rows, and bytes (data + indexes, as InnoDB
// reports them after ANALYZE TABLE, in 16 KiB pages).
type auditFootprint struct {
	auditRows, tallyRows   int64
	auditBytes, tallyBytes int64
}

func (f auditFootprint) String() string {
	return fmt.Sprintf("idempotency_audit %d rows %d bytes, idempotency_audit_tally %d rows %d bytes",
		f.auditRows, f.auditBytes, f.tallyRows, f.tallyBytes)
}

func footprint(t *testing.T, db *testdb.Database) auditFootprint {
	t.Helper()
	var f auditFootprint
	for _, tb := range []struct {
		name        string
		rows, bytes *int64
	}{{"idempotency_audit", &f.auditRows, &f.auditBytes}, {"idempotency_audit_tally", &f.tallyRows, &f.tallyBytes}} {
		_, err := db.DB.Exec("ANALYZE TABLE " + tb.name)
		require.NoError(t, err)
		require.NoError(t, db.DB.Get(tb.rows, "SELECT COUNT(*) FROM "+tb.name))
		require.NoError(t, db.DB.Get(tb.bytes, `SELECT data_length + index_length FROM information_schema.TABLES
			WHERE table_schema = DATABASE() AND table_name = ?`, tb.name))
	}
	return f
}

// TestReplayStormAddsCountsNotRows: a replay storm on one key through serve (several callers at
// once, three API keys of one tenant) adds one tally per actor to the audit tables, not a row per
// request, and the history still names each actor with its count and its first and last time.
// IDEMGUARD_STORM_REQUESTS sets the storm's size (2,000 by default; docs/OPERATIONS.md records a
// run of 100,000). A store writing one row per replay fails the row bound.
func TestReplayStormAddsCountsNotRows(t *testing.T) {
	t.Parallel()
	requests := 2000
	if v := os.Getenv("IDEMGUARD_STORM_REQUESTS"); v != "" {
		var err error
		requests, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	db, c, llm := database(t), newClient(t), newFakeLLM(t)
	actorKeys := map[string]string{"billing": acmeKey, "batch": "acme-api-key-batch", "retry": "acme-api-key-retry"}
	env := productionEnv(db.DSN)
	env["IDEMGUARD_API_KEYS"] = "acme:billing=" + auth.HashAPIKey(acmeKey) + ",acme:batch=" + auth.HashAPIKey(actorKeys["batch"]) +
		",acme:retry=" + auth.HashAPIKey(actorKeys["retry"])
	s := startService(t, env, chatConfig(llm, "  - {name: chat, operation: openai_chat}\n", ""))
	const body = `{"messages":[{"role":"user","content":"storm"}],"max_tokens":16}`
	requireEnvelope(t, post(t, c, s, "chat", acmeKey, "storm-1", body))
	before := footprint(t, db)
	t.Logf("before the storm: %s", before)

	names := slices.Sorted(maps.Keys(actorKeys))
	var next atomic.Int64
	var wg sync.WaitGroup
	bad := make(chan string, 16)
	start := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(requests) {
					return
				}
				ans, err := tryDo(c, s, request{path: "/v1/ops/chat", apiKey: actorKeys[names[i%3]], key: "storm-1", body: body})
				if err != nil || ans.status != http.StatusOK {
					select {
					case bad <- fmt.Sprintf("request %d: %v %v", i, ans, err):
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(bad)
	for b := range bad {
		t.Fatal(b)
	}
	require.EqualValues(t, 1, llm.calls.Load(), "one execution, every other request a replay")

	var counted int64
	eventually(t, 30*time.Second, "every replay counted", func() bool {
		require.NoError(t, db.DB.Get(&counted, `SELECT COALESCE(SUM(n), 0) FROM idempotency_audit_tally WHERE kind = 'replay'`))
		return counted >= int64(requests)
	})
	require.EqualValues(t, requests, counted)
	after := footprint(t, db)
	t.Logf("%d replays in %s (%.0f/s) by %d actors", requests, elapsed.Round(time.Millisecond),
		float64(requests)/elapsed.Seconds(), len(names))
	t.Logf("after the storm:  %s", after)
	require.Zero(t, after.auditRows-before.auditRows, "a replay adds no idempotency_audit row")
	require.LessOrEqual(t, after.tallyRows-before.tallyRows, int64(len(names)), "one tally per actor at most")

	hist := do(t, c, s, request{method: http.MethodGet, path: "/v1/ops/chat/keys/storm-1/history", apiKey: acmeKey})
	require.Equal(t, http.StatusOK, hist.status, "history: %s", hist)
	var h struct {
		Events []auditLine `json:"events"`
	}
	require.NoError(t, json.Unmarshal(hist.body, &h))
	require.Equal(t, "claimed", h.Events[0].Kind)
	require.Equal(t, "key:billing", h.Events[0].Actor)
	perActor := map[string]int{}
	number := 1
	for _, e := range h.Events[1:] {
		require.Equal(t, "replay", e.Kind)
		require.NotNil(t, e.LastAt, "a count has its last time")
		require.False(t, e.LastAt.Before(e.At), "first %s, last %s", e.At, e.LastAt)
		require.Equal(t, number, e.Replay, "replays numbered through the counts")
		number += e.Count
		perActor[e.Actor] += e.Count
	}
	share := requests / 3
	require.Equal(t, map[string]int{"key:batch": share + boolInt(requests%3 > 0), "key:billing": share + boolInt(requests%3 > 1),
		"key:retry": share}, perActor)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
