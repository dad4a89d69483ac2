export { run, lookup, resetKey, pendingKey, outcomeKnown, backoff, parseRetryAfter, canonicalJSON, newKey, IdemguardError } from "./client.js";
export type { RunOptions, RunResult, KeyStore, Envelope, Problem, KeyRecord } from "./client.js";
export { submitJob, watchJob, cancelJob, keyHistory, forgetJob, jobKey, readEvents, isFinal, monitorLink } from "./jobs.js";
export type { JobEvent, JobProgress, KeyEventData, JobOptions, SubmitOptions, SubmitResult, WatchOptions, AuditEvent } from "./jobs.js";
export { runStream, parseEvents, contentOf } from "./stream.js";
export type { StreamEvent, StreamResult } from "./stream.js";
