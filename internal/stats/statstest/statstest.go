// Package statstest seeds a database with rows whose health figures are known, for the tests of
// package stats and of `idemguard stats`. It is not used by the binary.
package statstest

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
)

// The figures of [Seed]'s rows over a 24h window.
const (
	TotalKeys = 100
	// RetriedKeys have attempt_count 2 after a retry of a stored failure (a provider outage):
	// not takeovers. Counted as takeovers they would make the takeover rate 27%.
	RetriedKeys = 27
	FailedKeys  = 12 // 12%
	Requests    = 200
	Replays     = 45 // hit rate 22.5%
	// AverageTTL: 80 keys kept 24h, 20 kept 4h.
	AverageTTL = 20 * time.Hour
	// The idempotency_stats counters of the same name. Executions (claims + retries + takeovers)
	// are 100, so the stale takeover rate is 7%.
	Claims    = 66
	Retries   = 27
	Takeovers = 7
	Failures  = 4
)

// Seed inserts, relative to the database clock's now (N):
//
//   - 100 keys created at N-1h: 60 succeeded, 27 succeeded on a second attempt (a retry after a
//     failure), 12 failed, 1 still started; 80 kept 24h and 20 kept 4h past completion (or
//     creation, for the started one).
//   - 50 keys created at N-30h, all failed on a third attempt: outside a 24h window.
//   - idempotency_stats: this hour (scope a: 100 requests, 20 replays, 50 claims), 5 hours ago
//     (scope b: 50 requests, 10 replays, 6 claims, 27 retries, 7 takeovers, 4 failures), the hour
//     holding N-24h (scope a: 50 requests, 15 replays, 10 claims; counted, as buckets are whole
//     hours), and the hour before it (1,000 requests, all replays, 500 takeovers: outside the
//     window).
//
// It returns N.
func Seed(ctx context.Context, db *sqlx.DB) (time.Time, error) {
	var now time.Time
	if err := db.GetContext(ctx, &now, `SELECT UTC_TIMESTAMP(6)`); err != nil {
		return time.Time{}, err
	}
	insertKey := `INSERT INTO idempotency_keys
  (tenant, scope, key_hash, request_fingerprint, status, attempt_count, claim_nonce,
   created_at, started_at, heartbeat_at, completed_at, expires_at)
VALUES ('t', 's', SHA2(?, 256), REPEAT('f', 64), ?, ?, 'nonce', ?, ?, ?, ?, ?)`
	in := now.Add(-time.Hour)
	out := now.Add(-30 * time.Hour)
	for i := range TotalKeys {
		status, attempts := "succeeded", 1
		switch {
		case i < RetriedKeys:
			attempts = 2
		case i < RetriedKeys+FailedKeys:
			status = "failed"
		case i == TotalKeys-1:
			status = "started"
		}
		ttl := 24 * time.Hour
		if i%5 == 4 { // 20 of 100
			ttl = 4 * time.Hour
		}
		var completed any = in
		if status == "started" {
			completed = nil
		}
		if _, err := db.ExecContext(ctx, insertKey, fmt.Sprint("in-", i), status, attempts, in, in, in, completed, in.Add(ttl)); err != nil {
			return time.Time{}, fmt.Errorf("statstest: insert key: %w", err)
		}
	}
	for i := range 50 {
		if _, err := db.ExecContext(ctx, insertKey, fmt.Sprint("out-", i), "failed", 3, out, out, out, out, out.Add(time.Hour)); err != nil {
			return time.Time{}, fmt.Errorf("statstest: insert key: %w", err)
		}
	}

	hour := now.Truncate(time.Hour)
	edge := now.Add(-24 * time.Hour).Truncate(time.Hour)
	for _, b := range []struct {
		start                                                   time.Time
		scope                                                   string
		requests, replays, takeovers, failures, claims, retries int64
	}{
		{hour, "a", 100, 20, 0, 0, 50, 0},
		{hour.Add(-5 * time.Hour), "b", 50, 10, Takeovers, Failures, Claims - 60, Retries},
		{edge, "a", 50, 15, 0, 0, 10, 0},
		{edge.Add(-time.Hour), "a", 1000, 1000, 500, 0, 0, 0},
	} {
		if _, err := db.ExecContext(ctx, `INSERT INTO idempotency_stats
  (bucket_start, scope, requests, replays, takeovers, failures, claims, retries, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))`, b.start, b.scope, b.requests, b.replays, b.takeovers, b.failures, b.claims, b.retries); err != nil {
			return time.Time{}, fmt.Errorf("statstest: insert stats bucket: %w", err)
		}
	}
	return now, nil
}
