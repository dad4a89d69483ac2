package main

import (
	"github.com/idemguard/idemguard/internal/config"
	"github.com/idemguard/idemguard/internal/ops"
	"github.com/idemguard/idemguard/routers"
)

func routerScopes(reg *ops.Registry) []routers.Scope {
	names := reg.Names()
	out := make([]routers.Scope, 0, len(names))
	for _, name := range names {
		s, _ := reg.Lookup(name)
		out = append(out, routers.Scope{Name: s.Name, Settings: s.Settings, KeyRequired: s.KeyRequired,
			Timeout: s.Timeout, Run: s.Run, Validate: s.Validate, Stream: s.Stream, StreamReplay: s.StreamReplay,
			Isolation: routers.Isolation(s.Isolation), Tenants: s.Tenants, Async: s.Async, InputSchema: s.InputSchema})
	}
	return out
}

// routerDoors are the configured provider doors.
func routerDoors(ds []config.Door) []routers.Door {
	out := make([]routers.Door, 0, len(ds))
	for _, d := range ds {
		out = append(out, routers.Door{Wire: routers.Wire(d.Wire), Prefix: d.Prefix, Models: d.Models, Scope: d.Scope,
			KeyRequired: d.KeyRequired, MaxWait: d.MaxWait})
	}
	return out
}
