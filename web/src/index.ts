export { run, lookup, pendingKey, outcomeKnown, backoff, parseRetryAfter, canonicalJSON, newKey, IdemguardError } from "./client.js";
export type { RunOptions, RunResult, KeyStore, Envelope, Problem, KeyRecord } from "./client.js";
