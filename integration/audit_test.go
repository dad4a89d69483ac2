package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
}

// tableEvent is one row of idempotency_audit.
type tableEvent struct {
	ID      string `db:"event_id"`
	Kind    string `db:"kind"`
	KeyHash string `db:"key_hash"`
	Attempt int    `db:"attempt"`
	Actor   string `db:"actor"`
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
	require.NoError(t, db.DB.Select(&out, `SELECT event_id, kind, key_hash, attempt, actor FROM idempotency_audit
		WHERE key_hash = ? ORDER BY at, event_id`, keyHash))
	return out
}

func countKinds[E any](events []E, kind func(E) string) map[string]int {
	out := map[string]int{}
	for _, e := range events {
		out[kind(e)]++
	}
	return out
}

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
// their events, the same ones (ids included) in the idempotency_audit table and in each
// process's JSON-lines stream; the history route answers them to the key's tenant only; and
// no canary (client key, prompt, API key) appears in the table, a stream or the history.
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
	var table []tableEvent
	eventually(t, 10*time.Second, "the storm's 22 events in the table", func() bool {
		table = tableOfKey(t, db, stormHash)
		return len(table) >= 22
	})
	require.Equal(t, stormWant, countKinds(table, func(e tableEvent) string { return e.Kind }))
	for _, e := range table {
		require.Equal(t, 1, e.Attempt)
		require.Equal(t, "key:billing", e.Actor)
	}
	var stream []auditLine
	eventually(t, 10*time.Second, "the storm's 22 events in process A's stream", func() bool {
		stream = streamOfKey(readStream(t, streamA), stormHash)
		return len(stream) >= 22
	})
	require.Equal(t, sortedIDs(table, func(e tableEvent) string { return e.ID }),
		sortedIDs(stream, func(e auditLine) string { return e.ID }), "the table and the stream hold the same events")
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
	require.Len(t, h.Events, 22)
	require.Equal(t, "claimed", h.Events[0].Kind)
	replays := 0
	for _, e := range h.Events {
		if e.Kind == "replay" {
			replays++
			require.Equal(t, replays, e.Replay, "replays are numbered")
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
		COALESCE(stop_reason, ''), COALESCE(detail, '')) FROM idempotency_audit`))
	streams := []string{strings.Join(dump, "\n"), string(hist.body)}
	for _, p := range []string{streamA, streamB} {
		s, err := os.ReadFile(p)
		require.NoError(t, err)
		streams = append(streams, string(s))
	}
	for i, s := range streams {
		require.NotEmpty(t, s)
		for _, canary := range []string{canaryKey, "canary prompt", "4111", acmeKey, secret, model} {
			require.NotContains(t, s, canary, "sink %d", i)
		}
	}
}
