// Package pipeline is the one HTTP pipeline of every entry path of package
// routers and routers/middleware: a REST operation, a background job, a
// stream, and the middleware's plain and streamed forms.
//
//   - Read reads a request before the guard runs (Idempotency-Key, JSON
//     body, Prefer: wait); Request.Call builds its idemguard.Call from a
//     Route, the small value that says what differs between the doors;
//   - Ref and ParseRef are the key-reference codec (a client key, or "~"
//     and a key hash);
//   - Answers is the one error and result writer: ProblemFor decides every
//     status, and Retry-After is set in one place for every answer that
//     promises it;
//   - SSE and Stream deliver server-sent events.
//
// It imports no gin, so a net/http program of routers/middleware links none.
package pipeline
