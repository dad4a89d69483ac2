package galera_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/faulttest"
	"github.com/idemguard/idemguard/internal/mysqlconn"
)

// TestNodeShutDownUnderLoad: one node of the cluster is shut down (SHUTDOWN, a real mariadbd
// exit: its connections close, its port refuses, the cluster goes on with two) while three
// replicas, one per node, serve fresh keys. The replica of the node that is down answers every
// call with ErrStoreUnavailable (a 503) at once, never after its store timeout; the other two
// keep serving; no key runs twice or overlaps. Then .ci/galera.sh start-node brings the node
// back (it rejoins by incremental state transfer) and its replica serves again.
//
// It needs the cluster of .ci/galera.sh (the node is restarted by it), runs alone (a node of
// the shared cluster is down for a while), and takes about 10s, most of it the node's restart.
//
// Checked by hand on 2026-11-27 (MariaDB 10.11, galera-4, .ci/galera.sh): with the fail-fast
// path removed (mysqlstore's interpretError no longer marking a refused dial ErrNotSent, so the
// guard re-reads the row until its store timeout), the first call to the replica of the node
// that was down took 3.0s and the test failed on it; with it, 123–139 calls in the 1.5s,
// the slowest 1–17ms, while the other two replicas served 650–1,700 calls.
func TestNodeShutDownUnderLoad(t *testing.T) {
	raw := requireCluster(t)
	dsns := strings.Split(raw, ",")
	const (
		clients  = 6 // two per replica
		storeTO  = 4 * time.Second
		downFor  = 1500 * time.Millisecond
		fastPast = time.Second // a call to the lost replica answers within this
		lost     = 2           // the node shut down (index into the cluster's nodes)
	)
	c := newCluster(t, causalReads)
	guards := c.guards(t, func(int, idemguard.Event) {}, func(cfg *idemguard.Config) { cfg.StoreTimeout = storeTO })
	rec := faulttest.NewRecorder()

	var (
		mu                sync.Mutex
		downAt, backAt    time.Time
		lostCalls, served int
		lostSlowest       time.Duration
		unexpected        []string
	)
	stopClients := faulttest.Clients(clients, func(cl, n int) bool {
		key := fmt.Sprintf("c%d-%d", cl, n)
		r := cl % len(guards) // a client of replica r
		began := time.Now()
		res, err := guards[r].Do(context.Background(), shutdownCall(key), rec.Op(key, 2*time.Millisecond))
		took := time.Since(began)
		ok := err == nil && res.Status == idemguard.StatusSucceeded && !res.LostClaim
		mu.Lock()
		down := !downAt.IsZero() && began.After(downAt) && backAt.IsZero()
		switch {
		case err != nil && !errors.Is(err, idemguard.ErrStoreUnavailable):
			unexpected = append(unexpected, fmt.Sprintf("replica %d key %s: %v", r+1, key, err))
		case r == lost && down:
			lostCalls++
			lostSlowest = max(lostSlowest, took)
			if ok {
				unexpected = append(unexpected, fmt.Sprintf("replica %d served key %s while its node was down", r+1, key))
			}
		case r != lost && down && ok:
			served++
		}
		mu.Unlock()
		if !ok {
			time.Sleep(5 * time.Millisecond)
		}
		return true
	})
	t.Cleanup(stopClients)

	time.Sleep(300 * time.Millisecond)
	addr := shutdownNode(t, dsns[lost])
	mu.Lock()
	downAt = time.Now()
	mu.Unlock()
	// A client of the lost replica may still be in a call begun before the shutdown (its
	// statement lost with the connection: the outcome is unknown, and the guard re-reads);
	// this one calls it only while the node is known down.
	for n := 0; time.Since(downAt) < downFor; n++ {
		key := fmt.Sprintf("down-%d", n)
		began := time.Now()
		res, err := guards[lost].Do(context.Background(), shutdownCall(key), rec.Op(key, 0))
		took := time.Since(began)
		require.ErrorIs(t, err, idemguard.ErrStoreUnavailable, "replica %d answered %s while its node was down", lost+1, res.Status)
		mu.Lock()
		lostCalls++
		lostSlowest = max(lostSlowest, took)
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	backAt = time.Now()
	mu.Unlock()
	startNode(t, lost+1)
	// The lost replica serves again once its node is back.
	var again time.Duration
	for n := 0; ; n++ {
		key := fmt.Sprintf("back-%d", n)
		res, err := guards[lost].Do(context.Background(), shutdownCall(key), rec.Op(key, 0))
		if err == nil {
			require.Equal(t, idemguard.StatusSucceeded, res.Status)
			again = time.Since(backAt)
			break
		}
		require.ErrorIs(t, err, idemguard.ErrStoreUnavailable)
		require.Less(t, time.Since(backAt), time.Minute, "the replica of node %d (%s) never served again", lost+1, addr)
		time.Sleep(20 * time.Millisecond)
	}
	stopClients()

	t.Logf("node %d down for %s: %d calls to its replica, slowest %s; %d served by the others; its replica served again %s after the restart began",
		lost+1, downFor, lostCalls, lostSlowest, served, again)
	require.Empty(t, unexpected)
	require.Positive(t, lostCalls, "no call reached the replica of the node that was down")
	require.Less(t, lostSlowest, fastPast, "a call to the replica of the node that was down waited (store timeout %s)", storeTO)
	require.Positive(t, served, "the other replicas did not serve while the node was down")
	require.Empty(t, rec.Overlaps())
	for _, key := range rec.Keys() {
		require.Len(t, rec.Runs(key), 1, "key %s", key)
	}
}

// shutdownCall is the call of a fresh key; its lease is short, so that a call whose commit
// was cut by the shutdown stops retrying it soon.
func shutdownCall(key string) idemguard.Call {
	return idemguard.Call{Tenant: "acme", Scope: "galera.shutdown", ClientKey: key, Inputs: key,
		Settings: idemguard.Settings{StaleAfter: 3 * time.Second}}
}

// shutdownNode shuts down the node of dsn (SHUTDOWN) and waits until its port refuses
// connections; it returns the node's address.
func shutdownNode(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(strings.TrimSpace(dsn))
	require.NoError(t, err)
	admin, err := mysqlconn.Open(t.Context(), dsn, mysqlconn.PoolConfig{MaxOpenConns: 1})
	require.NoError(t, err)
	_, _ = admin.ExecContext(t.Context(), "SHUTDOWN") // the server may close the connection before it answers
	_ = admin.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", cfg.Addr, time.Second)
		if err != nil {
			return cfg.Addr
		}
		_ = conn.Close()
		require.True(t, time.Now().Before(deadline), "node %s still accepts connections 30s after SHUTDOWN", cfg.Addr)
		time.Sleep(20 * time.Millisecond)
	}
}

// startNode starts node n (1-based) of the .ci/galera.sh cluster again and waits until the
// cluster is three synced nodes.
func startNode(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	script, err := filepath.Abs(filepath.Join("..", "..", ".ci", "galera.sh"))
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, "bash", script, "start-node", fmt.Sprint(n))
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s start-node %d (the test needs the cluster of .ci/galera.sh):\n%s", script, n, out)
}
