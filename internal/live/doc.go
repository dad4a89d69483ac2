// Package live carries the events of an execution that is running in this
// process to the callers who watch it while it runs: the chunks of a streamed
// model answer, relayed to its first caller and to duplicates that attach to
// it, and the state changes of a background job, pushed to the watchers of
// its key.
//
// # Overview
//
// The owner of a claim opens a Log for its key (Hub.Open), appends events as
// they happen (Log.Append) and closes the log when the execution ends
// (Log.Close). Anyone in the same process may attach a Cursor
// (Hub.Attach) and read every event from the first one, then each new one as
// it is appended, until the log is closed.
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
//   - A Log keeps at most MaxBytes of events (a ring: the oldest go first). A
//     cursor whose next event was dropped gets ErrLagged; a new cursor on a
//     log that has dropped its beginning gets ErrLagged at once. Either
//     falls back to the stored answer.
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
