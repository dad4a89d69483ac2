package routers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/routers/internal/pipeline"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/tenancy"
)

// holdScope is a scope whose executions run until release closes; it
// counts those running.
type holdScope struct {
	running, most atomic.Int64
	release       chan struct{}
	once          sync.Once
}

func newHoldScope(t *testing.T) *holdScope {
	h := &holdScope{release: make(chan struct{})}
	t.Cleanup(h.free)
	return h
}

func (h *holdScope) free() { h.once.Do(func() { close(h.release) }) }

func (h *holdScope) scope(name string) Scope {
	return Scope{Name: name, Run: func(ctx context.Context, _ json.RawMessage) (any, error) {
		n := h.running.Add(1)
		defer h.running.Add(-1)
		for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
		}
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return map[string]any{"ok": true}, nil
	}}
}

// limited records the OnLimited calls.
type limited struct {
	mu    sync.Mutex
	calls map[string]int
}

func (l *limited) on(tenant tenancy.ID, limit string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.calls == nil {
		l.calls = map[string]int{}
	}
	l.calls[string(tenant)+"/"+limit]++
}

func (l *limited) count(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[key]
}

// latency is the median time of n sequential echo requests of beta.
func latency(b *testBundle, n int, tag string) time.Duration {
	ds := make([]time.Duration, n)
	for i := range n {
		start := time.Now()
		w := b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: fmt.Sprintf(`{"n":%d}`, i), apiKey: betaKey,
			headers: []string{"Idempotency-Key", fmt.Sprintf("%s-%d", tag, i)}})
		ds[i] = time.Since(start)
		require.Equal(b.t, http.StatusOK, w.Code, w.Body.String())
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[n/2]
}

// One tenant's 200 background submissions run up to its job limit and get
// 429 job-limit past it, while another tenant is served as fast as before;
// a duplicate of a running key still joins it at the limit. Before the
// limits, all 200 ran at once.
func TestOneTenantsFloodLeavesOthersServed(t *testing.T) {
	t.Parallel()
	hold := newHoldScope(t)
	var seen limited
	b := setup(t, setupOpts{options: func(o *Options) {
		o.Scopes = append(o.Scopes, hold.scope("hold"))
		o.Limits.OnLimited = seen.on
	}})
	normal := latency(b, 20, "before")

	const n = 200
	codes, byCode := floodJobs(t, b, n)
	require.Equal(t, map[int]int{http.StatusAccepted: DefaultLimitJobs, http.StatusTooManyRequests: n - DefaultLimitJobs}, byCode,
		"%d background submissions of one tenant", n)
	require.Eventually(t, func() bool { return hold.running.Load() == DefaultLimitJobs }, 5*time.Second, time.Millisecond)
	require.Equal(t, n-DefaultLimitJobs, seen.count("acme/"+pipeline.LimitJobs))

	// The other tenant is served within its normal latency.
	during := latency(b, 20, "during")
	require.Less(t, during, max(10*normal, 250*time.Millisecond), "beta's median latency went from %s to %s", normal, during)

	// At the limit, a duplicate of a running key joins it (202, the same
	// job), and a fresh key is refused.
	for i, c := range codes {
		if c != http.StatusAccepted {
			continue
		}
		w := b.post("hold", fmt.Sprintf("job-%03d", i), `{}`, "Prefer", "respond-async")
		require.Equal(t, http.StatusAccepted, w.Code, w.Body.String())
		break
	}
	require.Equal(t, http.StatusTooManyRequests, b.post("hold", "one-more", `{}`, "Prefer", "respond-async").Code)
	require.EqualValues(t, DefaultLimitJobs, hold.most.Load())

	// The jobs end: their places are free again.
	hold.free()
	require.Eventually(t, func() bool {
		return b.post("hold", "after", `{}`, "Prefer", "respond-async").Code == http.StatusAccepted
	}, 5*time.Second, 5*time.Millisecond)
}

// floodJobs submits n background jobs of acme's "hold" scope at once,
// keys job-000 on, and returns each one's status and the count of each
// status; every 429 names the job limit and carries Retry-After.
func floodJobs(t *testing.T, b *testBundle, n int) (codes []int, byCode map[int]int) {
	t.Helper()
	codes = make([]int, n)
	types := make([]string, n)
	retry := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			w := b.post("hold", fmt.Sprintf("job-%03d", i), `{}`, "Prefer", "respond-async")
			codes[i], retry[i] = w.Code, w.Header().Get("Retry-After")
			if w.Code == http.StatusTooManyRequests {
				var p pipeline.Problem
				if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
					t.Error(err)
				}
				types[i] = p.Type
			}
		})
	}
	wg.Wait()
	byCode = map[int]int{}
	for i, c := range codes {
		byCode[c]++
		if c == http.StatusTooManyRequests {
			require.Equal(t, ProblemTypePrefix+pipeline.LimitJobs, types[i])
			require.NotEmpty(t, retry[i], "a 429 without Retry-After")
		}
	}
	return codes, byCode
}

// The concurrency limit of a scope and the request rate: 429 with the
// problem type naming the limit and Retry-After until the bucket has room
// again; other tenants are not touched.
func TestScopeAndRateLimits(t *testing.T) {
	t.Parallel()
	hold := newHoldScope(t)
	var seen limited
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	b := setup(t, setupOpts{options: func(o *Options) {
		o.Scopes = append(o.Scopes, hold.scope("hold"))
		o.Limits = Limits{Tenant: Limit{Rate: 2, Burst: 4}, Scopes: map[string]Limit{"hold": {Concurrent: 1}},
			OnLimited: seen.on, Now: clock}
	}})

	require.Equal(t, http.StatusAccepted, b.post("hold", "a", `{}`, "Prefer", "respond-async").Code)
	w := b.post("hold", "b", `{}`, "Prefer", "respond-async")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	require.Equal(t, ProblemTypePrefix+pipeline.LimitScopeConcurrent, problemOf(t, w)["type"])
	require.Equal(t, "1", w.Header().Get("Retry-After"))
	require.Equal(t, 1, seen.count("acme/"+pipeline.LimitScopeConcurrent))

	// Two requests are left of the burst of four.
	require.Equal(t, http.StatusOK, b.post("echo", "", `{"n":1}`).Code)
	require.Equal(t, http.StatusOK, b.post("echo", "", `{"n":1}`).Code)
	w = b.post("echo", "", `{"n":1}`)
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	p := problemOf(t, w)
	require.Equal(t, ProblemTypePrefix+pipeline.LimitRate, p["type"])
	require.Equal(t, "rate_limited", p["stopReason"])
	require.Equal(t, "1", w.Header().Get("Retry-After")) // half a second, rounded up
	require.Equal(t, 1, seen.count("acme/"+pipeline.LimitRate))
	// A lookup counts too.
	require.Equal(t, http.StatusTooManyRequests, b.do(req{method: http.MethodGet, path: "/v1/ops/hold/keys/a", apiKey: acmeKey1}).Code)

	// beta has its own bucket.
	w = b.do(req{method: http.MethodPost, path: "/v1/ops/echo", body: `{"n":2}`, apiKey: betaKey})
	require.Equal(t, http.StatusOK, w.Code)

	advance(500 * time.Millisecond) // room for one more
	require.Equal(t, http.StatusOK, b.post("echo", "", `{"n":1}`).Code)
	require.Equal(t, http.StatusTooManyRequests, b.post("echo", "", `{"n":1}`).Code)
}

// Limits.Off turns the limits off: every submission runs, as before.
func TestLimitsOff(t *testing.T) {
	t.Parallel()
	hold := newHoldScope(t)
	b := setup(t, setupOpts{options: func(o *Options) {
		o.Scopes = append(o.Scopes, hold.scope("hold"))
		o.Limits.Off = true
	}})
	for i := range DefaultLimitJobs + 5 {
		require.Equal(t, http.StatusAccepted, b.post("hold", fmt.Sprintf("k%d", i), `{}`, "Prefer", "respond-async").Code)
	}
	require.Eventually(t, func() bool { return hold.running.Load() == DefaultLimitJobs+5 }, 5*time.Second, time.Millisecond)
}

// slowClaims delays every claim INSERT.
type slowClaims struct{ store.Store }

func (s slowClaims) Claim(ctx context.Context, p store.ClaimParams) (uint64, error) {
	time.Sleep(20 * time.Millisecond)
	return s.Store.Claim(ctx, p)
}

// Concurrent duplicates of one key race for its claim together: they share
// one place, so none is refused while one of them runs it, even with room
// for one job only. Counting each call, the racers took every place and the
// others got 429 job-limit.
func TestDuplicatesRacingForAClaimShareOnePlace(t *testing.T) {
	t.Parallel()
	hold := newHoldScope(t)
	b := setup(t, setupOpts{options: func(o *Options) {
		o.Scopes = append(o.Scopes, hold.scope("hold"))
		o.Limits = Limits{Tenant: Limit{Jobs: 1, Concurrent: 1}}
	}, guard: func(c *idemguard.Config) {
		c.Store = slowClaims{c.Store} // the racers' INSERTs in flight together, as on a real database
	}})
	const n = 100
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { codes[i] = b.post("hold", "storm", `{}`, "Prefer", "respond-async").Code })
	}
	wg.Wait()
	for i, c := range codes {
		require.Equal(t, http.StatusAccepted, c, "duplicate %d", i)
	}
	require.Equal(t, http.StatusTooManyRequests, b.post("hold", "other", `{}`, "Prefer", "respond-async").Code)
	require.EqualValues(t, 1, hold.most.Load())
}
