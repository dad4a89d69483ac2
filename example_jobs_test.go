package idemguard_test

import (
	"context"
	"fmt"
	"io"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/store/memstore"
)

// A long-running operation: Start answers at once while the operation runs
// in the background; Watch follows the key (from this process or any other
// sharing the store) until the stored answer; a duplicate while it runs is
// the same job.
func ExampleGuard_Start() {
	ctx := context.Background()
	guard, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: exampleSecret})
	if err != nil {
		panic(err)
	}
	defer guard.Close(ctx)

	call := idemguard.Call{Tenant: "acme", Scope: "research", ClientKey: "report-7", Inputs: map[string]any{"topic": 7}}
	release := make(chan struct{})
	op := func(ctx context.Context) (any, error) {
		<-release // minutes of model calls
		return map[string]any{"ok": true, "data": map[string]any{"pages": 12}}, nil
	}
	res, err := guard.Start(ctx, call, op)
	if err != nil {
		panic(err)
	}
	fmt.Println("accepted:", res.Accepted, res.Status)
	dup, _ := guard.Start(ctx, call, op)
	fmt.Println("duplicate:", dup.Accepted, dup.Status)

	key, err := guard.KeyOfHash("acme", "research", res.KeyHash)
	if err != nil {
		panic(err)
	}
	w, err := guard.Watch(ctx, key, "")
	if err != nil {
		panic(err)
	}
	defer w.Close()
	close(release)
	for {
		e, err := w.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			panic(err)
		}
		if e.Kind == idemguard.EventAlive {
			continue // heartbeats, as many as the run takes
		}
		fmt.Println(e.Kind, e.Attempt)
		if e.Final() {
			fmt.Println(e.Info.Envelope.Data["pages"])
		}
	}
	// Output:
	// accepted: true in_progress
	// duplicate: false in_progress
	// started 1
	// succeeded 1
	// 12
}

// Cancel records the request on the key's row, so any process may make it;
// the owner's heartbeat cancels the operation (cause ErrCanceled) and the key
// ends failed with stopReason canceled. The same call then runs it again.
func ExampleGuard_Cancel() {
	ctx := context.Background()
	guard, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: exampleSecret,
		Defaults: idemguard.Settings{StaleAfter: idemguard.MinStaleAfter}}) // a heartbeat every 100ms
	if err != nil {
		panic(err)
	}
	defer guard.Close(ctx)

	call := idemguard.Call{Tenant: "acme", Scope: "research", ClientKey: "report-8", Inputs: map[string]any{"topic": 8}}
	stopped := make(chan error, 1)
	op := func(ctx context.Context) (any, error) {
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return nil, ctx.Err()
	}
	res, err := guard.Start(ctx, call, op)
	if err != nil {
		panic(err)
	}
	key, err := guard.KeyOfHash("acme", "research", res.KeyHash)
	if err != nil {
		panic(err)
	}
	if err := guard.Cancel(ctx, key); err != nil {
		panic(err)
	}
	fmt.Println("cause:", <-stopped)

	w, err := guard.Watch(ctx, key, "")
	if err != nil {
		panic(err)
	}
	defer w.Close()
	for {
		e, err := w.Next(ctx)
		if err == io.EOF {
			break
		}
		if e.Final() {
			fmt.Println(e.Kind, e.Info.Envelope.StopReason)
		}
	}
	again, _ := guard.Start(ctx, call, func(context.Context) (any, error) { return nil, nil })
	fmt.Println("runs again:", again.Accepted)
	// Output:
	// cause: idemguard: operation canceled on request
	// canceled canceled
	// runs again: true
}
