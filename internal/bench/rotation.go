package main

import (
	"context"
	"sync/atomic"

	"github.com/idemguard/idemguard"
)

// The rotation suite measures what a previous secret costs the write path.
// With Config.PreviousSecrets a call that wins its claim reads the request's
// rows under the other secrets (one SELECT by the unique key, all hashes in
// one IN list) before the operation starts; without one, nothing changes.
// Both cases run Do on fresh client keys with a no-op operation, like the
// fresh suite's guard-fresh; the ratio of guard-fresh-previous-secret to
// guard-fresh is the price of a rotation in progress.

func init() {
	register(suite{name: "rotation", about: "write path: Do on fresh keys without vs with a previous secret configured", run: runRotation})
}

const scopeRotation = "bench.rotation"

func runRotation(ctx context.Context, e *env) ([]row, error) {
	plain, err := e.newGuard(nil)
	if err != nil {
		return nil, err
	}
	defer closeGuard(plain)
	rotating, err := e.newGuard(func(c *idemguard.Config) {
		c.SecretID = "new"
		c.PreviousSecrets = []idemguard.SecretVersion{{ID: "old", Secret: []byte(randomHex(32))}}
	})
	if err != nil {
		return nil, err
	}
	defer closeGuard(rotating)
	var seq atomic.Int64
	fresh := func(name, baseline string, g *idemguard.Guard) benchCase {
		return benchCase{name: name, baseline: baseline, op: freshDo(g, scopeRotation, "rotation-", &seq)}
	}
	without := fresh("guard-fresh", "", plain)
	with := fresh("guard-fresh-previous-secret", without.name, rotating)
	var rows []row
	for _, c := range e.opts.concurrency {
		r, err := e.compare(ctx, "rotation", c, without, with)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}
