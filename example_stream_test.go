package idemguard_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store/memstore"
)

// printer is a StreamWriter that prints what it gets; an HTTP handler
// would write server-sent events and flush each.
type printer struct{}

func (printer) Begin(s idemguard.StreamStart) { fmt.Println("begin:", s.Origin) }

func (printer) Write(e idemguard.Chunk) error {
	fmt.Println("event:", string(e.Data))
	return nil
}

// A streamed operation runs once: its first caller gets the events as they
// are emitted, a duplicate gets the same events from the store, and a plain
// Do for the key gets the assembled answer.
func ExampleGuard_DoStream() {
	ctx := context.Background()
	guard, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: exampleSecret})
	if err != nil {
		panic(err)
	}
	defer guard.Close(ctx)

	call := idemguard.Call{Tenant: "acme", Scope: "chat", ClientKey: "conv-7-turn-3",
		Inputs: map[string]any{"prompt": idemguard.HashUserText("Say hello")}, Detach: true}
	op := idemguard.StreamOperation{Run: func(ctx context.Context, emit func(idemguard.Chunk)) (any, error) {
		var text strings.Builder
		for _, token := range []string{"Hel", "lo"} { // a model's chunks
			text.WriteString(token)
			emit(idemguard.Chunk{Data: []byte(`{"delta":"` + token + `"}`)})
		}
		return sanitize.Envelope{OK: true, Data: map[string]any{"text": text.String()}}, nil
	}}
	for range 2 {
		if _, err := guard.DoStream(ctx, call, op, printer{}); err != nil {
			panic(err)
		}
	}
	res, err := guard.Do(ctx, call, func(context.Context) (any, error) { panic("not run again") })
	if err != nil {
		panic(err)
	}
	fmt.Println("plain:", res.Envelope.Data["text"], res.Cached)
	// Output:
	// begin: live
	// event: {"delta":"Hel"}
	// event: {"delta":"lo"}
	// begin: replayed
	// event: {"delta":"Hel"}
	// event: {"delta":"lo"}
	// plain: Hello true
}

// idWriter keeps the last chunk ID it got, as a client keeps the last SSE
// id it received, and prints each chunk's place in its execution.
type idWriter struct{ last string }

func (w *idWriter) Begin(s idemguard.StreamStart) {
	fmt.Printf("begin: %s, attempt %d, restart %q\n", s.Origin, s.Attempt, s.Restart)
}

func (w *idWriter) Write(e idemguard.Chunk) error {
	w.last = e.ID
	fmt.Println("event", e.ID[strings.LastIndexByte(e.ID, '-')+1:]+":", string(e.Data))
	return nil
}

// A caller whose connection dropped sends the ID of the last chunk it got
// as Call.LastEventID: it gets the chunks after it, each once.
func ExampleGuard_DoStream_resume() {
	ctx := context.Background()
	guard, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: exampleSecret})
	if err != nil {
		panic(err)
	}
	defer guard.Close(ctx)

	call := idemguard.Call{Tenant: "acme", Scope: "chat", ClientKey: "conv-7-turn-4",
		Inputs: map[string]any{"prompt": idemguard.HashUserText("Count to three")}, Detach: true}
	op := idemguard.StreamOperation{Run: func(ctx context.Context, emit func(idemguard.Chunk)) (any, error) {
		for _, n := range []string{"one", "two", "three"} {
			emit(idemguard.Chunk{Data: []byte(`{"delta":"` + n + `"}`)})
		}
		return sanitize.Envelope{OK: true}, nil
	}}
	first := &idWriter{}
	if _, err := guard.DoStream(ctx, call, op, first); err != nil {
		panic(err)
	}
	// The connection dropped after the first chunk: its ID is "<attempt>-<execution>-1".
	call.LastEventID = first.last[:strings.LastIndexByte(first.last, '-')] + "-1"
	if _, err := guard.DoStream(ctx, call, op, &idWriter{}); err != nil {
		panic(err)
	}
	// Output:
	// begin: live, attempt 1, restart ""
	// event 1: {"delta":"one"}
	// event 2: {"delta":"two"}
	// event 3: {"delta":"three"}
	// begin: replayed, attempt 1, restart ""
	// event 2: {"delta":"two"}
	// event 3: {"delta":"three"}
}
