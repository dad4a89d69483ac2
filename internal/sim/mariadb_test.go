package sim_test

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/idemguard/idemguard/internal/mysqlstore"
	"github.com/idemguard/idemguard/internal/sim"
	"github.com/idemguard/idemguard/internal/testdb"
	"github.com/idemguard/idemguard/store"
)

var flagMySQLSeeds = flag.Int("sim.mysql-seeds", 2, "seeds run in real time over MySQL/MariaDB (TestSimulationMariaDB)")

// TestSimulationMariaDB runs the simulation in real time over MySQL/MariaDB (a fresh database
// per seed, internal/testdb): the same workload and faults as the virtual-time run, with a
// lease of one second, fewer faults and no clock skew (the database's clock is its own). The
// statements run on real connections, so the linearizability check here is of the server.
func TestSimulationMariaDB(t *testing.T) {
	t.Parallel()
	start := *flagStart
	if *flagSeed != 0 {
		start = *flagSeed
	}
	for seed := start; seed < start+uint64(*flagMySQLSeeds); seed++ {
		db := testdb.New(t)
		sc := sim.Generate(seed, sim.Defect(*flagDefect), true)
		rows := func() []store.Record {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var out []store.Record
			rs, err := db.DB.QueryxContext(ctx, `SELECT id, tenant, scope, key_hash, status, attempt_count FROM idempotency_keys`)
			require.NoError(t, err)
			defer rs.Close()
			for rs.Next() {
				var r store.Record
				var status string
				require.NoError(t, rs.Scan(&r.ID, &r.Tenant, &r.Scope, &r.KeyHash, &status, &r.Attempts))
				r.Status = store.RowStatus(status)
				out = append(out, r)
			}
			require.NoError(t, rs.Err())
			return out
		}
		trail := func() []store.AuditEvent {
			out := []store.AuditEvent{} // not nil: the trail is checked even when empty
			var ids []struct {
				ID   string `db:"event_id"`
				Kind string `db:"kind"`
			}
			// The durable events, and the claim events the rows still carry.
			require.NoError(t, db.DB.Select(&ids, `SELECT event_id, kind FROM idempotency_audit
UNION ALL SELECT claim_event_id, 'claimed' FROM idempotency_keys k WHERE claim_event_id IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM idempotency_audit a WHERE a.event_id = k.claim_event_id)`))
			for _, e := range ids {
				out = append(out, store.AuditEvent{ID: e.ID, Kind: store.AuditKind(e.Kind)})
			}
			return out
		}
		begin := time.Now()
		h := sim.Simulate(sc, sim.Env{Store: mysqlstore.New(db.DB), Rows: rows, Trail: trail, Start: time.Now()})
		ops, execs, answers := h.Counts()
		lin := sim.CheckLinearizable(h, 20*time.Second)
		v := sim.Check(h)
		if lin.Result == porcupine.Illegal {
			v = append(v, sim.Violation{Kind: sim.VLinearizability, Detail: "the server's statements are not linearizable"})
		}
		t.Logf("seed %d on MariaDB: %d statements, %d executions, %d answers, linearizability %s, %d violations, %s",
			seed, ops, execs, answers, lin.Result, len(v), time.Since(begin).Round(time.Millisecond))
		if len(v) > 0 {
			o := outcome{seed: seed, ops: ops, violations: v, linear: lin.Result, h: h}
			report(t, o, sim.Defect(*flagDefect))
			t.Logf("replay on MariaDB: go test -race -count=1 -run '^TestSimulationMariaDB$' ./internal/sim -sim.seed=%d -sim.mysql-seeds=1", seed)
			return
		}
	}
}
