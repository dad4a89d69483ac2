package main

import (
	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/internal/engine"
	"github.com/idemguard/idemguard/internal/ops"
	"github.com/idemguard/idemguard/routers"
)

// serve builds its Guard and API from the public packages, as a team's own
// service would; these convert what the configuration holds in engine terms.

func publicSettings(s engine.Settings) idemguard.Settings {
	return idemguard.Settings{TTL: s.TTL, StaleAfter: s.StaleAfter, MaxAttempts: s.MaxAttempts,
		StalePolicy: idemguard.StalePolicy(s.StalePolicy)}
}

// engineEvent is what the metrics and the stats recorder observe.
func engineEvent(e idemguard.Event) engine.Event {
	return engine.Event{Kind: engine.EventKind(e.Kind), Scope: e.Scope, Duration: e.Duration, Reason: e.StopReason,
		Failed: e.Failed, StoreOp: e.StoreOp, FromMemory: e.FromMemory, Field: e.Field}
}

func routerScopes(reg *ops.Registry) []routers.Scope {
	names := reg.Names()
	out := make([]routers.Scope, 0, len(names))
	for _, name := range names {
		s, _ := reg.Lookup(name)
		out = append(out, routers.Scope{Name: s.Name, Settings: publicSettings(s.Settings), KeyRequired: s.KeyRequired,
			Timeout: s.Timeout, Run: s.Run})
	}
	return out
}
