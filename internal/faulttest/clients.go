package faulttest

import "sync"

// Clients starts n client goroutines that put load on a system while a fault
// comes and goes: client c calls do(c, i) for i = 0, 1, … until stop is
// called or do returns false. stop waits for every client to end; calling it
// again does nothing.
func Clients(n int, do func(client, i int) bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for c := range n {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if !do(c, i) {
					return
				}
			}
		})
	}
	return sync.OnceFunc(func() { close(done); wg.Wait() })
}
