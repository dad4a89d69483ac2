package idemguard_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemguard/idemguard"
	"github.com/idemguard/idemguard/sanitize"
	"github.com/idemguard/idemguard/store/memstore"
)

// exampleSecret is 32 bytes; a real one comes from a secret store.
var exampleSecret = []byte("an-example-secret-of-32-bytes!!!")

// A duplicate call does not run the operation again: it gets the stored
// answer, marked cached.
func ExampleGuard_Do() {
	ctx := context.Background()
	guard, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: exampleSecret})
	if err != nil {
		panic(err)
	}
	defer guard.Close(ctx)

	call := idemguard.Call{Tenant: "acme", Scope: "orders.summarize", ClientKey: "order-42",
		Inputs: map[string]any{"order": 42}}
	runs := 0
	op := func(ctx context.Context) (any, error) {
		runs++
		return map[string]any{"ok": true, "data": map[string]any{"summary": "two items"}}, nil
	}
	for range 2 {
		res, err := guard.Do(ctx, call, op)
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Status, res.Cached, string(res.Body))
	}
	fmt.Println("runs:", runs)
	// Output:
	// succeeded false {"ok":true,"stopReason":"completed","needsHuman":false,"cached":false,"data":{"summary":"two items"}}
	// succeeded true {"ok":true,"stopReason":"completed","needsHuman":false,"cached":true,"data":{"summary":"two items"}}
	// runs: 1
}

// An operation says why it failed with an OpError; the failure is stored and
// the next call with the same key runs the operation again.
func ExampleOpError() {
	ctx := context.Background()
	guard, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: exampleSecret})
	if err != nil {
		panic(err)
	}
	defer guard.Close(ctx)

	call := idemguard.Call{Tenant: "acme", Scope: "chat", Inputs: map[string]any{"q": idemguard.HashUserText("Hi there")}}
	attempt := 0
	op := func(ctx context.Context) (any, error) {
		attempt++
		if attempt == 1 {
			return nil, &idemguard.OpError{Reason: sanitize.RateLimited, Err: errors.New("upstream said 429")}
		}
		return map[string]any{"ok": true}, nil
	}
	for range 2 {
		res, err := guard.Do(ctx, call, op)
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Status, res.StopReason, res.StatusCode, "attempt", res.Attempt)
	}
	// Output:
	// failed rate_limited 502 attempt 1
	// succeeded completed 200 attempt 2
}

// Lookup tells what is stored for a client key.
func ExampleGuard_Lookup() {
	ctx := context.Background()
	guard, err := idemguard.New(idemguard.Config{Store: memstore.New(), Secret: exampleSecret})
	if err != nil {
		panic(err)
	}
	defer guard.Close(ctx)

	key, err := guard.Key("acme", "orders.create", "order-7")
	if err != nil {
		panic(err)
	}
	_, err = guard.Lookup(ctx, key)
	fmt.Println(errors.Is(err, idemguard.ErrNotFound))

	_, err = guard.Do(ctx, idemguard.Call{Tenant: "acme", Scope: "orders.create", ClientKey: "order-7"},
		func(ctx context.Context) (any, error) {
			return idemguard.Response{StatusCode: 201, Value: map[string]any{"ok": true}}, nil
		})
	if err != nil {
		panic(err)
	}
	info, err := guard.Lookup(ctx, key)
	if err != nil {
		panic(err)
	}
	fmt.Println(info.Status, info.Attempts, info.StatusCode)
	// Output:
	// true
	// succeeded 1 201
}
