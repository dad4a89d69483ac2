// Package live carries the events of an execution that is running in this
// process to the callers who watch it while it runs: the chunks of a streamed
// model answer, relayed to its first caller and to duplicates that attach to
// it, and the state changes of a background job, pushed to the watchers of
// its key.
//
// # Overview
//
// The owner of a claim opens a Log for its key and execution (Hub.Open with
// the Run: the attempt and claim nonce the row holds), appends events as
// they happen (Log.Append; the n-th event has sequence n, from 1) and
// closes the log when the execution ends (Log.Close). Anyone in the same
// process who read the row may attach a Cursor to the execution the row
// names (Hub.Attach with that Run, and the number of events it already
// has) and read every later event, then each new one as it is appended,
// until the log is closed.
//
// A log is bound to one execution: Attach refuses a Run that is not the
// open log's (ErrNoLog), and a log opened for another execution of the key
// ends the old one for its readers (ErrSuperseded). So a reader never
// relays two executions: an old owner whose operation outlived its claim
// keeps its log in this process, but a caller that read the new attempt's
// row does not attach to it.
//
// The database stays the authority. A Log is only a faster path for callers
// in the owner's process: it holds no state that decides anything, it dies
// with the process, and a caller that finds no log (the owner runs
// elsewhere), or that falls too far behind, learns the outcome from the row
// instead (a stored replay, or polling the key's record).
//
// # Bounds
//
// Memory and connections are bounded so that a storm of duplicates cannot
// exhaust a replica:
//
//   - A Log keeps at most MaxBytes of events, counted in their wire form
//     (WireSize), the measure of a stored sequence (a ring: the oldest go
//     first). The guard passes Config.MaxStreamBytes, so a log drops events
//     only of an execution whose sequence is too long to be stored. A
//     cursor whose next event was dropped gets ErrLagged; so does a new
//     cursor whose first event was dropped. Either reads the rest from the
//     stored sequence, or, when none was stored, is told it lost events.
//   - A Hub admits at most MaxPerKey watchers of one key and MaxPerTenant of
//     one tenant (Hub.Admit, used by Attach and by watchers that poll the
//     database); over either, ErrTooManyWatchers at once, never a queue.
//
// # Wire format
//
// Events are server-sent events (the WHATWG EventSource format). AppendSSE
// renders one event; the same Event always renders to the same bytes, so a
// stored sequence replays byte for byte.
package live
