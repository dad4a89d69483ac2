package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/faulttest"
	"github.com/idemguard/idemguard/internal/testdb"
)

// With the database refusing connections, serve answers 503 with
// Retry-After at once, not after re-reading for the whole store timeout (a
// dial that never connected sent nothing: the outcome is known), and
// /readyz says so; once the database is back, serve answers 200 again
// within a second or so, without a restart.
//
// The bounds asserted are loose, for a loaded machine; the figures are
// printed (go test ./cmd/idemguard -run TestServeFailsFastWhileTheDatabaseRefuses -v).
func TestServeFailsFastWhileTheDatabaseRefuses(t *testing.T) {
	t.Parallel()
	const (
		requests = 100
		clients  = 10
	)
	db := testdb.New(t)
	proxy, cfg := faulttest.ProxyDSN(t, db.DSN)
	s := startServe(t, productionEnv(cfg.FormatDSN()), `
store_timeout: 5s
scopes:
  - {name: fast, operation: demo, delay: 1ms}
`)
	var mu sync.Mutex
	n := 0
	post := func() (int, http.Header, time.Duration) {
		mu.Lock()
		n++
		key := fmt.Sprintf("k-%d", n)
		mu.Unlock()
		req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/v1/ops/fast", strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer acme-key")
		req.Header.Set("Idempotency-Key", key)
		began := time.Now()
		resp, err := s.client.Do(req)
		took := time.Since(began)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, resp.Header, took
	}
	ready := func() int {
		resp, _ := s.get(t, "/readyz", "")
		return resp.StatusCode
	}
	code, _, _ := post()
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, http.StatusOK, ready())

	proxy.Refuse()
	var took []time.Duration
	work := make(chan struct{})
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range work {
				code, h, d := post()
				mu.Lock()
				took = append(took, d)
				mu.Unlock()
				require.Equal(t, http.StatusServiceUnavailable, code)
				require.NotEmpty(t, h.Get("Retry-After"))
			}
		})
	}
	for range requests {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	slices.Sort(took)
	p50, p99 := took[len(took)/2], took[len(took)*99/100-1]
	t.Logf("database refusing connections: %d requests (%d clients): 503 in p50 %s, p99 %s, max %s (store_timeout 5s)",
		requests, clients, p50, p99, took[len(took)-1])
	require.Less(t, p99, time.Second, "a 503 waited for the store timeout")
	require.Equal(t, http.StatusServiceUnavailable, ready())

	require.NoError(t, proxy.Accept())
	back := time.Now()
	var first time.Duration
	for {
		code, _, _ := post()
		if code == http.StatusOK {
			first = time.Since(back)
			break
		}
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Less(t, time.Since(back), 5*time.Second, "no 200 within 5s of the database's return")
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("database back: first 200 after %s", first)
	require.Less(t, first, time.Second)
	require.Equal(t, http.StatusOK, ready())
}
