// Long-running jobs: submit with Prefer: respond-async (202 at once, the job
// runs on the server), follow the key's event stream from any replica, and
// cancel it. The stream is read with fetch, not EventSource, so that the
// bearer credential travels in the Authorization header; it reconnects after
// a dropped connection with Last-Event-ID and resumes where it stopped.

import { IdemguardError, abortableSleep, canonicalJSON, defaultStore, newKey, type Envelope, type KeyRecord, type KeyStore, type Problem } from "./client.js";
import type { components } from "./openapi.gen.js";

/** The data of one event of GET …/keys/{key}/events. */
export type KeyEventData = components["schemas"]["KeyEvent"];

/** How far a job got, as its operation last reported it (done of total,
 * `fraction` when the total is known, a stage name from the scope's
 * allowlist). */
export type JobProgress = components["schemas"]["Progress"];

/** One transition of a job's key. */
export interface JobEvent extends KeyEventData {
  /** `<attempt>.<event>.<unix-micros>`: the same on every replica. */
  id: string;
}

/** Whether an event ends the job: its answer (or failure) is stored. */
export function isFinal(e: Pick<KeyEventData, "event">): boolean {
  return e.event === "succeeded" || e.event === "failed" || e.event === "canceled";
}

export interface JobOptions {
  /** The bearer credential, or a function that returns it (called before each request). */
  token: string | (() => string | Promise<string>);
  /** The API's origin. Default: same origin. */
  baseUrl?: string;
  fetch?: typeof fetch;
  signal?: AbortSignal;
}

export interface SubmitOptions extends JobOptions {
  /** Names the logical action (default: the scope and the input). Its key is
   * kept in `store` until forgetJob, so a resubmission after a reload or a
   * cancel is the same job. */
  action?: string;
  store?: KeyStore;
  newKey?: () => string;
}

/** What a submission answered. */
export interface SubmitResult {
  /** true: 202, the job runs (started now, or already running). */
  accepted: boolean;
  /** The Idempotency-Key sent. */
  key: string;
  /** Idempotency-Key-Ref: what watchJob, cancelJob and lookup take. */
  keyRef: string;
  /** The key record's path (Location). */
  location: string;
  /** true: this submission joined a job already running (the answer said
   * `Idempotent-Existing: true`); false for the one that started it. */
  existing: boolean;
  /** The job's events (the 202's `Link: <…>; rel="monitor"`, or the
   * record's eventsUrl); "" for an answer without one. */
  eventsUrl: string;
  status: number;
  /** The key record (202). */
  record?: KeyRecord;
  /** The stored answer of a job that had already completed (200). */
  envelope?: Envelope;
}

/**
 * Submits a job: POST /v1/ops/{scope} with Prefer: respond-async. Resolves
 * at once with 202 (accepted: the job runs on the server; follow it with
 * watchJob) or with the stored answer of a completed job. Rejects with an
 * IdemguardError for any other answer.
 */
export async function submitJob(scope: string, input: unknown, options: SubmitOptions): Promise<SubmitResult> {
  const store = options.store ?? defaultStore();
  const name = jobName(scope, options.action ?? canonicalJSON(input ?? {}));
  const key = store.getItem(name) ?? (options.newKey ?? newKey)();
  store.setItem(name, key);
  const resp = await send(options, `/v1/ops/${encodeURIComponent(scope)}`, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": key, Prefer: "respond-async" },
    body: JSON.stringify(input ?? {}),
  }, key);
  const keyRef = resp.headers.get("Idempotency-Key-Ref") ?? key;
  const location = resp.headers.get("Location") ?? "";
  if (resp.status === 202) {
    const record = (await resp.json()) as KeyRecord;
    const existing = resp.headers.get("Idempotent-Existing") === "true" || record.existing === true;
    const eventsUrl = monitorLink(resp.headers.get("Link")) ?? record.eventsUrl ?? "";
    return { accepted: true, key, keyRef, location, existing, eventsUrl, status: 202, record };
  }
  return { accepted: false, key, keyRef, location, existing: false, eventsUrl: "", status: resp.status, envelope: (await resp.json()) as Envelope };
}

/** The target of a Link header's rel="monitor" entry (RFC 8288), if any. */
export function monitorLink(header: string | null): string | undefined {
  for (const part of (header ?? "").split(",")) {
    const m = /^\s*<([^>]*)>(.*)$/.exec(part);
    if (m !== null && /;\s*rel\s*=\s*"?[^";]*\bmonitor\b/i.test(m[2] ?? "")) return m[1];
  }
  return undefined;
}

/** Forgets the key submitJob keeps for an action: the next submission is a new job. */
export function forgetJob(scope: string, input: unknown, options: Pick<SubmitOptions, "action" | "store"> = {}): void {
  (options.store ?? defaultStore()).removeItem(jobName(scope, options.action ?? canonicalJSON(input ?? {})));
}

/** The key submitJob keeps for an action, or null. */
export function jobKey(scope: string, input: unknown, options: Pick<SubmitOptions, "action" | "store"> = {}): string | null {
  return (options.store ?? defaultStore()).getItem(jobName(scope, options.action ?? canonicalJSON(input ?? {})));
}

/** Asks the job of a key to stop (POST …/keys/{key}/cancel). Resolves with
 * the key record once the request is recorded; the job ends `canceled` at
 * its next heartbeat. Rejects with status 409 when it has finished, 404 when
 * unknown. */
export async function cancelJob(scope: string, keyRef: string, options: JobOptions): Promise<KeyRecord> {
  const resp = await send(options, `${keyPath(scope, keyRef)}/cancel`, { method: "POST" }, keyRef);
  return (await resp.json()) as KeyRecord;
}

/** One decision about a key, as GET …/keys/{key}/history answers it. */
export type AuditEvent = components["schemas"]["AuditEvent"];

/** Reads a key's audit trail (GET …/keys/{key}/history), oldest first: its
 * claim, takeovers, retries, and the replays, 409s and 422s counted per
 * caller (`count`, first `at`, `lastAt`), with who asked. Rejects with status 404 when the key has no events for the
 * caller's tenant (unknown, another tenant's, or past retention). */
export async function keyHistory(scope: string, keyRef: string, options: JobOptions): Promise<AuditEvent[]> {
  const resp = await send(options, `${keyPath(scope, keyRef)}/history`, {}, keyRef);
  return ((await resp.json()) as { events: AuditEvent[] }).events;
}

export interface WatchOptions extends JobOptions {
  /** Resume after this event id (a page that saw some events before a reload). */
  lastEventId?: string;
  /** Reconnections in a row without a new event before giving up. Default 8. */
  maxReconnects?: number;
  /** First reconnection delay, doubled each time. Default 250 ms. */
  baseDelayMs?: number;
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

/**
 * Follows a job: yields each transition of its key (started, alive,
 * progress, cancel_requested, stale, then succeeded, failed or canceled
 * with the stored answer in `record.response`) and returns after the final
 * one. A `progress` event carries how far the job got in `progress` (also
 * in `record.progress` of every event, and in the record of the final
 * one); a `started` event of a new attempt starts it again from none. A
 * dropped connection is reopened with Last-Event-ID, so no transition is
 * lost or repeated. Throws an IdemguardError for 404 (unknown key), 429 (too
 * many watchers) and when reconnecting keeps failing.
 */
export async function* watchJob(scope: string, keyRef: string, options: WatchOptions): AsyncGenerator<JobEvent, void, void> {
  let last = options.lastEventId;
  let failures = 0;
  const max = options.maxReconnects ?? 8;
  const sleep = options.sleep ?? abortableSleep;
  for (;;) {
    let resp: Response | undefined;
    try {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (last !== undefined) headers["Last-Event-ID"] = last;
      resp = await send(options, `${keyPath(scope, keyRef)}/events`, { headers }, keyRef);
    } catch (err) {
      if (options.signal?.aborted) throw err;
      const retry = !(err instanceof IdemguardError) || err.status === undefined || err.status >= 500;
      if (!retry || ++failures > max) throw err;
      await sleep((options.baseDelayMs ?? 250) * 2 ** (failures - 1), options.signal);
      continue;
    }
    if (resp.status === 204) return; // nothing after the last event seen
    try {
      for await (const e of readEvents(resp)) {
        failures = 0;
        last = e.id;
        yield e;
        if (isFinal(e)) return;
      }
    } catch (err) {
      if (options.signal?.aborted) throw err;
    }
    // The stream ended before the final event (a replica shutting down, a
    // proxy's timeout): reconnect and resume.
    if (++failures > max) throw new IdemguardError("the event stream keeps closing", { key: keyRef, retryable: true });
    await sleep((options.baseDelayMs ?? 250) * 2 ** (failures - 1), options.signal);
  }
}

/** Parses a text/event-stream body into events (WHATWG framing: id, event,
 * data lines, a blank line ends an event; comments are skipped). */
export async function* readEvents(resp: Response): AsyncGenerator<JobEvent, void, void> {
  if (resp.body === null) return;
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let id = "";
  let data: string[] = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let nl: number;
      while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
        if (line === "") {
          if (data.length > 0) yield { ...(JSON.parse(data.join("\n")) as KeyEventData), id };
          id = "";
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let v = colon < 0 ? "" : line.slice(colon + 1);
        if (v.startsWith(" ")) v = v.slice(1);
        if (field === "id") id = v;
        else if (field === "data") data.push(v);
      }
    }
  } finally {
    reader.releaseLock();
  }
}

function keyPath(scope: string, keyRef: string): string {
  return `/v1/ops/${encodeURIComponent(scope)}/keys/${encodeURIComponent(keyRef)}`;
}

async function send(options: JobOptions, path: string, init: RequestInit & { headers?: Record<string, string> }, key: string): Promise<Response> {
  const doFetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  const token = typeof options.token === "function" ? await options.token() : options.token;
  const url = `${(options.baseUrl ?? "").replace(/\/+$/, "")}${path}`;
  let resp: Response;
  try {
    resp = await doFetch(url, { ...init, headers: { ...init.headers, Authorization: `Bearer ${token}` }, signal: options.signal ?? null });
  } catch (err) {
    if (options.signal?.aborted) throw err;
    throw new IdemguardError("network error", { key, retryable: true, cause: err });
  }
  if (resp.ok) return resp;
  let problem: Problem | undefined;
  try {
    problem = (await resp.json()) as Problem;
  } catch {
    problem = undefined;
  }
  throw new IdemguardError(problem?.detail ?? problem?.title ?? `HTTP ${resp.status}`, {
    status: resp.status, key, retryable: resp.status >= 500 || resp.status === 429, ...(problem ? { problem } : {}),
  });
}

const jobPrefix = "idemguard-job:";

function jobName(scope: string, action: string): string {
  return `${jobPrefix}${scope}:${action}`;
}

