// Package faulttest is idemguard's fault-injection kit: the failures at the
// edges of the protocol, made deterministic for tests.
//
//   - Proxy is a TCP proxy between a guard and MySQL that drops
//     connections, blackholes traffic for a time, adds latency, and cuts a
//     connection right after forwarding a chosen statement, so the statement
//     may apply while its reply is lost.
//   - Store wraps a store.Store and injects faults per method: an error
//     instead of the statement (a deadlock victim, rolled back), an error
//     after the statement applied (a lost reply), or a hook that blocks.
//   - Recorder is a fake upstream operation that records the interval of
//     every execution per key, so tests can prove that no two executions of
//     a key ever overlapped.
//
// Everything here binds to loopback only and is meant for tests.
package faulttest
