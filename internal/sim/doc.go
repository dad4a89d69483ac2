// Package sim tests the guard the way FoundationDB and Jepsen test theirs: it runs the real
// engine (package idemguard, unchanged) under injected faults, records every history, and
// checks each history against the guard's promises.
//
// # Pieces
//
//   - [Recorder] is a Store wrapper that writes every statement that reached the store into a
//     [History]: its inputs, what the store answered, and the order of calls and returns.
//     It sits directly above the real store (the in-memory store, MySQL, Galera), so it sees the truth:
//     a write whose reply the fault layer later "loses" is recorded as applied.
//   - [Faults] is a Store wrapper, one per replica, that injects what its [Plan] (chosen by a
//     seed) says: lost replies (applied, error returned), outcomes the store cannot report
//     (ErrOutcomeUnknown without applying, as MySQL's 1213/1205), slow replies longer than the
//     lease (the write landing late, after its caller gave up), outages, owner pauses (every
//     store call of the replica held, so its heartbeats stall) and crashes (every later call of
//     the replica blocks until the run ends and never applies).
//   - [Simulate] runs one seed: several Guards (replicas) share one in-memory store whose clock is
//     skewed from the application's, callers race on a few keys, the faults stop, callers that
//     said nothing ran are given time to release, and a probe per key proves no row is left
//     started without a living owner. Under testing/synctest time is virtual, so a seed costs
//     milliseconds and a five-minute lease costs nothing.
//   - [Check] holds a History to the invariants (see [Violation] kinds), and
//     [CheckLinearizable] checks the recorded store statements with porcupine against a
//     per-key model of the row.
//
// # What "replays a seed" means
//
// A seed fixes the workload, the settings and the fault plan. Within one virtual instant,
// the order in which runnable goroutines run is still Go's scheduler's choice, and the
// engine's jitter and nonces come from its own randomness, so a seed replays the same plan
// but not necessarily the same interleaving: the replay command runs the seed repeatedly
// (-sim.repeat) until it fails again.
package sim
