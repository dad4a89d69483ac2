package integration

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemguard/idemguard/internal/live"
	"github.com/idemguard/idemguard/internal/ssetest"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/stretchr/testify/require"
)

// Long-running jobs: Prefer: respond-async, the key's event stream, cancel, a dead owner, a
// TTL shorter than the run, a storm of submissions over three replicas, and SIGTERM.

var async = [2]string{"Prefer", "respond-async"}

// jobUpstream is the fake model for jobs: every call blocks until release (then completes) or
// until serve cancels it (the request's context ends), which it records with the time.
type jobUpstream struct {
	*fakeLLM
	mu       sync.Mutex
	released chan struct{}
	once     sync.Once
	canceled []time.Time
}

// jobReplicas starts two replicas (a, b) of serve with jobsConfig on one
// database, against one job upstream, and a client.
func jobReplicas(t *testing.T) (*testdb.Database, *jobUpstream, *http.Client, *service, *service) {
	t.Helper()
	db, u, c := database(t), newJobUpstream(t), newClient(t)
	cfg := jobsConfig(u, "", "")
	return db, u, c, startService(t, productionEnv(db.DSN), cfg), startService(t, productionEnv(db.DSN), cfg)
}

// submitRunning submits the job key to s and returns its location once the
// upstream call has begun (it is the first).
func submitRunning(t *testing.T, c *http.Client, s *service, u *jobUpstream, key string) string {
	t.Helper()
	loc := requireAccepted(t, submit(t, c, s, key))
	eventually(t, 10*time.Second, "the upstream call", func() bool { return u.calls.Load() == 1 })
	return loc
}

func newJobUpstream(t *testing.T) *jobUpstream {
	t.Helper()
	u := &jobUpstream{fakeLLM: newFakeLLM(t), released: make(chan struct{})}
	u.set(func(n int32, w http.ResponseWriter, r *http.Request) {
		select {
		case <-u.released:
			complete(w, n)
		case <-r.Context().Done():
			u.mu.Lock()
			u.canceled = append(u.canceled, time.Now())
			u.mu.Unlock()
		}
	})
	t.Cleanup(u.release) // before the fake server closes: it waits for its handlers
	return u
}

// release lets every running call, and every later one, complete.
func (u *jobUpstream) release() { u.once.Do(func() { close(u.released) }) }

func (u *jobUpstream) cancellations() []time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]time.Time(nil), u.canceled...)
}

// jobsConfig is a jobs scope (openai_chat) on u with a 1.5 s lease: a heartbeat, and so a
// cancel check, every 500 ms. settings are more flow-map entries for the scope.
func jobsConfig(u *jobUpstream, settings, extra string) string {
	return chatConfig(u.fakeLLM, "  - {name: jobs, operation: openai_chat, stale_after: 1500ms"+settings+"}\n", extra)
}

func submit(t *testing.T, c *http.Client, s *service, key string) answer {
	t.Helper()
	return post(t, c, s, "jobs", acmeKey, key, chatBody, async)
}

// requireAccepted checks a 202 of respond-async and returns its Location.
func requireAccepted(t *testing.T, a answer) string {
	t.Helper()
	require.Equal(t, http.StatusAccepted, a.status, "answer: %s", a)
	require.Equal(t, "respond-async", a.header.Get("Preference-Applied"))
	loc := a.header.Get("Location")
	require.NotEmpty(t, loc)
	var rec keyRecord
	require.NoError(t, json.Unmarshal(a.body, &rec), "answer: %s", a)
	require.NotEmpty(t, rec.Status)
	return loc
}

// requireJoined checks a 202's events link (Link rel="monitor", eventsUrl)
// and whether it says it joined a running job (Idempotent-Existing,
// existing).
func requireJoined(t *testing.T, a answer, existing bool) {
	t.Helper()
	var rec struct {
		Existing  *bool  `json:"existing"`
		EventsURL string `json:"eventsUrl"`
	}
	require.NoError(t, json.Unmarshal(a.body, &rec))
	events := a.header.Get("Location") + "/events"
	require.Equal(t, events, rec.EventsURL)
	require.Equal(t, "<"+events+`>; rel="monitor"`, a.header.Get("Link"))
	require.NotNil(t, rec.Existing, "answer: %s", a)
	require.Equal(t, existing, *rec.Existing)
	require.Equal(t, map[bool]string{true: "true"}[existing], a.header.Get("Idempotent-Existing"))
}

// sseEvent is one server-sent event as a client reads it.
type sseEvent struct {
	id, kind string
	data     struct {
		Event   string `json:"event"`
		Attempt int    `json:"attempt"`
		Record  struct {
			Status          string          `json:"status"`
			Stale           bool            `json:"stale"`
			Next            string          `json:"next"`
			CancelRequested bool            `json:"cancelRequested"`
			Response        json.RawMessage `json:"response"`
		} `json:"record"`
		Progress *struct {
			Done  int64  `json:"done"`
			Total int64  `json:"total"`
			Stage string `json:"stage"`
		} `json:"progress"`
	}
}

// watch opens GET {path}/events on s and returns the answer's status and its events; the
// channel closes when the stream ends.
func watch(t *testing.T, s *service, path, lastEventID string) (int, <-chan sseEvent) {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return ssetest.Open(t, &http.Client{Transport: tr}, s.url(path+"/events"), acmeKey, lastEventID,
		func(ev live.Event) (sseEvent, error) {
			e := sseEvent{id: ev.ID, kind: ev.Type}
			return e, json.Unmarshal(ev.Data, &e.data)
		})
}

// next waits for the stream's next event; false when it ended.
func next(t *testing.T, events <-chan sseEvent) (sseEvent, bool) {
	t.Helper()
	return ssetest.Next(t, events, 20*time.Second)
}

// all reads the stream to its end.
func all(t *testing.T, events <-chan sseEvent) []sseEvent {
	t.Helper()
	var evs []sseEvent
	for e, ok := next(t, events); ok; e, ok = next(t, events) {
		evs = append(evs, e)
	}
	return evs
}

type jobRow struct {
	Status     string  `db:"status"`
	Attempts   int     `db:"attempt_count"`
	StopReason *string `db:"stop_reason"`
}

func readJob(t *testing.T, db interface {
	Get(dest any, query string, args ...any) error
}) jobRow {
	t.Helper()
	var r jobRow
	require.NoError(t, db.Get(&r, `SELECT status, attempt_count,
  JSON_UNQUOTE(JSON_EXTRACT(response_json, '$.stopReason')) AS stop_reason FROM idempotency_keys`))
	return r
}

// 1. 202 with Location; a duplicate while it runs, on another replica, gets 202 with the same
// Location; after completion the stored answer; exactly one upstream call. A derived key (no
// Idempotency-Key) works the same through the record's ref.
func TestJobAcceptedDuplicateThenStoredAnswer(t *testing.T) {
	t.Parallel()
	db, u, c, a, b := jobReplicas(t)

	first := submit(t, c, a, "job-1")
	loc := requireAccepted(t, first)
	require.Equal(t, "/v1/ops/jobs/keys/job-1", loc)
	requireJoined(t, first, false)
	eventually(t, 10*time.Second, "the upstream call", func() bool { return u.calls.Load() == 1 })
	dup := submit(t, c, b, "job-1")
	require.Equal(t, loc, requireAccepted(t, dup), "the existing job, not a 409")
	requireJoined(t, dup, true)
	require.Equal(t, "started", readJob(t, db.DB).Status)

	derived := post(t, c, a, "jobs", acmeKey, "", `{"messages":[{"role":"user","content":"derived"}]}`, async)
	dloc := requireAccepted(t, derived)
	require.Regexp(t, `^/v1/ops/jobs/keys/~[0-9a-f]{64}$`, dloc)
	require.Equal(t, dloc, requireAccepted(t, post(t, c, b, "jobs", acmeKey, "", `{"messages":[{"role":"user","content":"derived"}]}`, async)))

	u.release()
	var done answer
	eventually(t, 10*time.Second, "the stored answer", func() bool {
		done = submit(t, c, b, "job-1")
		return done.status == http.StatusOK
	})
	require.Equal(t, "true", done.header.Get("Idempotent-Replayed"))
	require.True(t, requireEnvelope(t, done).Cached)
	require.Equal(t, loc, done.header.Get("Location"))
	resp, rec := lookup(t, c, a, "jobs", acmeKey, "job-1")
	require.Equal(t, http.StatusOK, resp.status)
	require.Equal(t, "succeeded", rec.Status)
	require.EqualValues(t, 2, u.calls.Load(), "one upstream call per key")
}

// 2. A watcher connected to replica B sees every transition of a job running on replica A, and
// the final answer, in order; so does one on A, with the same event ids.
func TestJobWatchedFromAnotherReplica(t *testing.T) {
	t.Parallel()
	_, u, c, a, b := jobReplicas(t)

	loc := requireAccepted(t, submit(t, c, a, "watched"))
	code, onB := watch(t, b, loc, "")
	require.Equal(t, http.StatusOK, code)
	code, onA := watch(t, a, loc, "")
	require.Equal(t, http.StatusOK, code)
	first, _ := next(t, onB)
	require.Equal(t, "started", first.kind)
	require.Equal(t, 1, first.data.Attempt)
	alive, _ := next(t, onB)
	require.Equal(t, "alive", alive.kind, "a heartbeat on A (every 500ms) reaches B")
	u.release()

	var finals []string
	for _, evs := range [][]sseEvent{append([]sseEvent{first, alive}, all(t, onB)...), all(t, onA)} {
		require.Equal(t, "started", evs[0].kind)
		require.Equal(t, first.id, evs[0].id, "the same transition has the same id on every replica")
		last := evs[len(evs)-1]
		require.Equal(t, "succeeded", last.kind)
		require.Equal(t, "succeeded", last.data.Record.Status)
		var env envelope
		require.NoError(t, json.Unmarshal(last.data.Record.Response, &env))
		require.True(t, env.OK)
		for _, e := range evs[1 : len(evs)-1] {
			require.Equal(t, "alive", e.kind)
		}
		finals = append(finals, last.id)
	}
	require.Equal(t, finals[0], finals[1])

	// A reconnect, to the other replica, after the started event seen on B resumes after it;
	// after the final one there is nothing more (204: an EventSource stops reconnecting).
	_, resumed := watch(t, a, loc, first.id)
	evs := all(t, resumed)
	require.NotEmpty(t, evs)
	require.NotEqual(t, "started", evs[0].kind)
	require.Equal(t, finals[0], evs[len(evs)-1].id)
	code, _ = watch(t, b, loc, finals[0])
	require.Equal(t, http.StatusNoContent, code)
	require.EqualValues(t, 1, u.calls.Load())
}

// 3. Cancel through replica B stops the upstream call on replica A within one heartbeat
// interval plus a margin; the row is failed / canceled, the attempt not counted; resubmitting
// the same key runs once more. Without the cancel read-back in the heartbeat the upstream call
// is never cancelled and this fails.
func TestJobCanceledThroughAnotherReplica(t *testing.T) {
	t.Parallel()
	db, u, c, a, b := jobReplicas(t)

	loc := submitRunning(t, c, a, u, "cancel-me")
	_, events := watch(t, b, loc, "")
	asked := time.Now()
	cancel := do(t, c, b, request{path: loc + "/cancel", apiKey: acmeKey})
	require.Equal(t, http.StatusAccepted, cancel.status, "cancel: %s", cancel)
	eventually(t, 5*time.Second, "the upstream call cancelled", func() bool { return len(u.cancellations()) == 1 })
	const heartbeat, margin = 500 * time.Millisecond, time.Second
	took := u.cancellations()[0].Sub(asked)
	require.Less(t, took, heartbeat+margin, "cancelled %s after the request", took)

	evs := all(t, events)
	last := evs[len(evs)-1]
	require.Equal(t, "canceled", last.kind)
	require.Contains(t, string(last.data.Record.Response), `"stopReason":"canceled"`)
	row := readJob(t, db.DB)
	require.Equal(t, "failed", row.Status)
	require.Equal(t, "canceled", *row.StopReason)
	require.Equal(t, 0, row.Attempts, "a canceled attempt is not counted")

	again := do(t, c, a, request{path: loc + "/cancel", apiKey: acmeKey})
	requireProblem(t, again, http.StatusConflict, "")
	require.Equal(t, http.StatusNotFound, do(t, c, b, request{path: "/v1/ops/jobs/keys/no-such/cancel", apiKey: acmeKey}).status)
	require.Equal(t, http.StatusNotFound, do(t, c, b, request{path: loc + "/cancel", apiKey: globexKey}).status, "another tenant's key")

	require.Equal(t, loc, requireAccepted(t, submit(t, c, b, "cancel-me")))
	eventually(t, 10*time.Second, "the second run", func() bool { return u.calls.Load() == 2 })
	u.release()
	eventually(t, 10*time.Second, "the second run stored", func() bool { return readJob(t, db.DB).Status == "succeeded" })
	require.Equal(t, 1, readJob(t, db.DB).Attempts)
	require.EqualValues(t, 2, u.calls.Load())
}

// 4. kill -9 of the owner: the record and the stream show stale after staleAfter, with what to
// do; a resubmission takes over and completes.
func TestJobOfAKilledOwnerShowsStaleThenIsTakenOver(t *testing.T) {
	t.Parallel()
	db, u, c, a, b := jobReplicas(t)

	loc := submitRunning(t, c, a, u, "orphan")
	_, events := watch(t, b, loc, "")
	a.kill()
	var stale sseEvent
	for e, ok := next(t, events); ok; e, ok = next(t, events) {
		if e.kind == "stale" {
			stale = e
			break
		}
		require.Contains(t, []string{"started", "alive"}, e.kind)
	}
	require.Equal(t, "stale", stale.kind)
	require.True(t, stale.data.Record.Stale)
	require.Contains(t, stale.data.Record.Next, "same Idempotency-Key")
	resp := do(t, c, b, request{method: http.MethodGet, path: loc, apiKey: acmeKey})
	require.Contains(t, string(resp.body), `"stale":true`)

	require.Equal(t, loc, requireAccepted(t, submit(t, c, b, "orphan")))
	taken, _ := next(t, events)
	require.Equal(t, "started", taken.kind)
	require.Equal(t, 2, taken.data.Attempt)
	u.release()
	evs := all(t, events)
	require.Equal(t, "succeeded", evs[len(evs)-1].kind)
	row := readJob(t, db.DB)
	require.Equal(t, "succeeded", row.Status)
	require.Equal(t, 2, row.Attempts)
}

// 5. A job whose TTL runs out during its run is neither deleted by cleanup nor re-claimed
// while it runs: its heartbeats put expires_at a TTL ahead again. The TTL runs out by ageing
// the row on the database's clock (a test connection sets expires_at in the past), never by
// waiting for it. Without the extension in the heartbeat (Store.Renew), expires_at stays in
// the past and this fails.
func TestJobOutlivesItsTTLOnlyWhileItRuns(t *testing.T) {
	t.Parallel()
	db, u, c := database(t), newJobUpstream(t), newClient(t)
	// A 6 s lease (a heartbeat every 2 s), not jobsConfig's 1.5 s: no TTL is waited out here,
	// so a longer lease costs little and keeps a loaded machine from a stale takeover.
	cfg := chatConfig(u.fakeLLM, "  - {name: jobs, operation: openai_chat, stale_after: 6s, ttl: 1h}\n", "")
	a := startService(t, productionEnv(db.DSN), cfg)
	b := startService(t, productionEnv(db.DSN), cfg)
	secondsAhead := func() float64 {
		var ahead float64
		require.NoError(t, db.DB.Get(&ahead, `SELECT TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1e6 FROM idempotency_keys`))
		return ahead
	}

	requireAccepted(t, submit(t, c, a, "long"))
	eventually(t, 10*time.Second, "the upstream call", func() bool { return u.calls.Load() == 1 })
	for range 3 { // three TTLs run out during the run
		_, err := db.DB.Exec(`UPDATE idempotency_keys SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND`)
		require.NoError(t, err)
		runAs(t, db.DSN, 0, "cleanup")
		require.Equal(t, 1, countRows(t, db), "cleanup left the running job")
		requireAccepted(t, submit(t, c, b, "long"))
		eventually(t, 10*time.Second, "a heartbeat puts expires_at a TTL ahead again", func() bool {
			return secondsAhead() > 3600-60
		})
	}
	require.EqualValues(t, 1, u.calls.Load(), "never re-claimed while it ran")
	u.release()
	eventually(t, 10*time.Second, "the job stored", func() bool { return readJob(t, db.DB).Status == "succeeded" })
	var kept float64
	require.NoError(t, db.DB.Get(&kept, `SELECT TIMESTAMPDIFF(MICROSECOND, completed_at, expires_at) / 1e6 FROM idempotency_keys`))
	require.InDelta(t, 3600, kept, 1, "once done, the TTL counts from completion")
	_, err := db.DB.Exec(`UPDATE idempotency_keys SET expires_at = expires_at - INTERVAL 1 HOUR`) // the TTL passes
	require.NoError(t, err)
	runAs(t, db.DSN, 0, "cleanup")
	require.Equal(t, 0, countRows(t, db), "once its TTL from completion has passed, cleanup deletes it")
}

// 6. 300 concurrent async submissions of one key over 3 replicas: 1 execution, every answer 202
// with the same Location (or the replay once done).
func TestJobThreeHundredSubmissionsOverThreeReplicas(t *testing.T) {
	t.Parallel()
	db, u, c := database(t), newJobUpstream(t), newClient(t)
	cfg := jobsConfig(u, "", "")
	replicas := []*service{startService(t, productionEnv(db.DSN), cfg), startService(t, productionEnv(db.DSN), cfg),
		startService(t, productionEnv(db.DSN), cfg)}

	answers := make([]answer, 300)
	errs := make([]error, 300)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range answers {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = tryDo(c, replicas[i%3], request{path: "/v1/ops/jobs", apiKey: acmeKey, key: "storm",
				body: chatBody, headers: [][2]string{async}})
		})
	}
	close(start)
	wg.Wait()
	u.release()
	accepted := 0
	for i, a := range answers {
		require.NoError(t, errs[i])
		switch a.status {
		case http.StatusAccepted:
			accepted++
			require.Equal(t, "/v1/ops/jobs/keys/storm", a.header.Get("Location"))
		case http.StatusOK:
			require.Equal(t, "true", a.header.Get("Idempotent-Replayed"), "answer %d: %s", i, a)
		default:
			t.Fatalf("answer %d: %s", i, a)
		}
	}
	require.Equal(t, 300, accepted, "the job was still running: every answer is the 202")
	eventually(t, 10*time.Second, "the job stored", func() bool { return readJob(t, db.DB).Status == "succeeded" })
	require.EqualValues(t, 1, u.calls.Load(), "one execution")
	require.Equal(t, 1, readJob(t, db.DB).Attempts)
}

// Shutdown: SIGTERM stops accepting, waits up to the grace period for a running job, which
// completes and is stored; the process exits 0. Without WaitJobs in serve's shutdown the job is
// cut off at once (failed / timeout) and this fails.
func TestJobSIGTERMWaitsForARunningJob(t *testing.T) {
	t.Parallel()
	db, u, c := database(t), newJobUpstream(t), newClient(t)
	s := startService(t, productionEnv(db.DSN), jobsConfig(u, "", "shutdown_grace: 20s"))
	submitRunning(t, c, s, u, "drained")
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	eventually(t, 10*time.Second, "serve stops accepting", func() bool {
		_, err := tryDo(c, s, request{method: http.MethodGet, path: "/healthz"})
		return err != nil
	})
	select {
	case <-s.exited:
		t.Fatal("serve exited while its job was running")
	case <-time.After(time.Second):
	}
	u.release()
	require.Equal(t, 0, s.waitExit(20*time.Second))
	row := readJob(t, db.DB)
	require.Equal(t, "succeeded", row.Status)
	require.Empty(t, u.cancellations())
}

// Shutdown past the grace period: the job is cut off and stored as a retryable failure.
func TestJobSIGTERMCutsOffAJobPastTheGrace(t *testing.T) {
	t.Parallel()
	db, u, c := database(t), newJobUpstream(t), newClient(t)
	cfg := jobsConfig(u, "", "shutdown_grace: 500ms")
	s := startService(t, productionEnv(db.DSN), cfg)
	submitRunning(t, c, s, u, "cut-job")
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, s.waitExit(20*time.Second))
	row := readJob(t, db.DB)
	require.Equal(t, "failed", row.Status)
	require.Equal(t, "timeout", *row.StopReason)
	require.Len(t, u.cancellations(), 1)

	next := startService(t, productionEnv(db.DSN), cfg)
	requireAccepted(t, submit(t, c, next, "cut-job"))
	eventually(t, 10*time.Second, "the retry", func() bool { return u.calls.Load() == 2 })
}

// 9. A job reporting 10 steps (the demo operation, 5 s) shows its progress
// to a watcher connected to the replica that does not run it: at least 3
// distinct progress events, in order; the row holds the last one. Each
// progress rode a heartbeat (every 300 ms) and B's poll of the row.
func TestJobProgressReachesAnotherReplica(t *testing.T) {
	t.Parallel()
	db, c := database(t), newClient(t)
	cfg := chatConfig(newFakeLLM(t), "  - {name: steps, operation: demo, delay: 5s, stale_after: 900ms, progress_stages: [thinking, writing]}\n", "")
	a, b := startService(t, productionEnv(db.DSN), cfg), startService(t, productionEnv(db.DSN), cfg)

	loc := requireAccepted(t, post(t, c, a, "steps", acmeKey, "steps-1", `{"q":"ten steps"}`, async))
	code, onB := watch(t, b, loc, "")
	require.Equal(t, http.StatusOK, code)
	evs := all(t, onB)
	require.Equal(t, "succeeded", evs[len(evs)-1].kind)
	var done []int64
	for _, e := range evs {
		if e.kind != "progress" {
			continue
		}
		require.NotNil(t, e.data.Progress)
		require.EqualValues(t, 10, e.data.Progress.Total)
		require.Contains(t, []string{"thinking", "writing"}, e.data.Progress.Stage)
		if len(done) > 0 {
			require.Greater(t, e.data.Progress.Done, done[len(done)-1], "in order, each once")
		}
		done = append(done, e.data.Progress.Done)
	}
	require.GreaterOrEqual(t, len(done), 3, "progress events on B: %v", done)

	var progress string
	require.NoError(t, db.DB.Get(&progress, `SELECT progress FROM idempotency_keys`))
	parts := strings.Split(progress, " ") // "<done> <total> <at micros> <stage>"
	require.Len(t, parts, 4, progress)
	require.Equal(t, []string{"10", "10", "writing"}, []string{parts[0], parts[1], parts[3]}, "the row holds the last one")
	_, rec := lookup(t, c, b, "steps", acmeKey, "steps-1")
	require.Equal(t, "succeeded", rec.Status)
}
