// Package progresshook carries the guard's progress sink in an operation's
// context: package progress reports through it, package idemguard installs
// it for each execution. It exists so that neither exports the hook.
package progresshook

import "context"

// Sink takes one report: done of total steps (total 0: not known) and a
// stage name ("" for none), unchecked. An interface, not a func: the
// guard's sink is a field of its heartbeat, passed without a closure.
type Sink interface {
	Report(done, total int64, stage string)
}

// Func is a Sink made of a function (tests).
type Func func(done, total int64, stage string)

// Report implements Sink.
func (f Func) Report(done, total int64, stage string) { f(done, total, stage) }

type key struct{}

// Key is the context key of the sink, for a context type that answers it
// itself (the guard's, which saves an allocation per call): its Value(Key)
// returns the Sink.
var Key any = key{}

// With returns ctx carrying s.
func With(ctx context.Context, s Sink) context.Context {
	return context.WithValue(ctx, key{}, s)
}

// From returns the sink ctx carries, nil for none.
func From(ctx context.Context) Sink {
	s, _ := ctx.Value(Key).(Sink)
	return s
}
