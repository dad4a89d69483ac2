// Package progresshook carries the guard's progress sink in an operation's
// context: package progress reports through it, package idemguard installs
// it for each execution. It exists so that neither exports the hook.
package progresshook

import "context"

// Sink takes one report: done of total steps (total 0: not known) and a
// stage name ("" for none), unchecked.
type Sink func(done, total int64, stage string)

type key struct{}

// With returns ctx carrying s.
func With(ctx context.Context, s Sink) context.Context {
	return context.WithValue(ctx, key{}, s)
}

// From returns the sink ctx carries, nil for none.
func From(ctx context.Context) Sink {
	s, _ := ctx.Value(key{}).(Sink)
	return s
}
