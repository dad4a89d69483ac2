// @idemguard/client: call idemguard from a browser so that one logical action
// runs once, whatever happens between the click and the answer.
//
// run() gives each logical action one Idempotency-Key and keeps it (in
// sessionStorage, or a store you pass) until the action's outcome is known:
// double clicks, retries after network errors, 5xx, 409 or 401, and a page
// reload while the call runs all reuse it, so the server runs the operation
// once and replays its answer. The key is released only by a success, a
// failure the server stored for good, or an answer the server gives before it
// claims a key (so nothing ran under it).

import type { components } from "./openapi.gen.js";

/** The sanitized result of an operation (docs/openapi.yaml, Envelope). */
export type Envelope = components["schemas"]["Envelope"];
/** An RFC 9457 error answer (docs/openapi.yaml, Problem). */
export type Problem = components["schemas"]["Problem"];
/** The state of a key, from GET /v1/ops/{scope}/keys/{key}. */
export type KeyRecord = components["schemas"]["KeyRecord"];

/** Where keys wait for their final answer. sessionStorage fits. */
export interface KeyStore {
  getItem(name: string): string | null;
  setItem(name: string, value: string): void;
  removeItem(name: string): void;
}

export interface RunOptions {
  /** The bearer credential: a JWT from your identity provider (a function
   * is called before each request, so it may refresh it). Never put a
   * tenant's API key into a browser. */
  token: string | (() => string | Promise<string>);
  /** The API's origin, e.g. "https://guard.example.com". Default: same origin. */
  baseUrl?: string;
  /** Names the logical action, e.g. "generate:form-42". Default: the scope
   * and the input, so the same input is the same action until it has a
   * final answer. */
  action?: string;
  /** Where the pending key is kept. Default: sessionStorage (in memory
   * where there is none). */
  store?: KeyStore;
  /** Prefer: wait=N, in seconds: a duplicate waits this long for the running
   * call's answer instead of getting 409. Default 10; 0 sends no Prefer. */
  waitSeconds?: number;
  /** Requests made at most, counting retries after network errors, 503 and
   * 409. Default 6. */
  maxAttempts?: number;
  /** First backoff delay, doubled on each retry. Default 250 ms. */
  baseDelayMs?: number;
  /** Cap of every delay, Retry-After included. Default 10 000 ms. */
  maxDelayMs?: number;
  /** Aborts the call; the key is kept (the outcome is unknown). */
  signal?: AbortSignal;
  /** Run the operation again even if the key has a stored answer
   * (Idempotency-Force-New: true; the scope must allow it, else 403). Sent
   * on the first request only: a retry after a network error replays
   * whatever the key then holds, so a lost answer never forces a second
   * run. `replacedAttempt` says whether this call's forced run replaced
   * an answer. */
  forceNew?: boolean;
  /** Replaceable for tests. */
  fetch?: typeof fetch;
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  random?: () => number;
  newKey?: () => string;
}

/** A successful answer. */
export interface RunResult {
  envelope: Envelope;
  /** true when the answer is a replay of an earlier execution. */
  cached: boolean;
  /** The Idempotency-Key sent. */
  key: string;
  /** The key reference (Idempotency-Key-Ref); GET {baseUrl}/v1/ops/{scope}/keys/{keyRef}. */
  keyRef: string;
  /** The HTTP status (200, or the stored status of a replay). */
  status: number;
  /** Idempotent-Completed-At of a replay. */
  completedAt?: string;
  /** Idempotent-Replaces-Attempt of a forced run (forceNew): the attempt
   * whose stored answer it replaced. */
  replacedAttempt?: number;
  /** Requests made. */
  attempts: number;
}

/** A call that did not succeed. */
export class IdemguardError extends Error {
  /** The HTTP status; undefined after network errors. */
  readonly status: number | undefined;
  readonly problem: Problem | undefined;
  readonly key: string;
  /** false: a final answer; the key was released, a new call is a new action.
   * true: the outcome is unknown (network errors, 5xx, 409 after
   * maxAttempts) or the request was refused before it reached the operation
   * (401, 403, 429: an earlier request with this key may still have run); the
   * key is kept, so calling run() again, e.g. with a fresh token, resumes it. */
  readonly retryable: boolean;

  constructor(message: string, init: { status?: number; problem?: Problem; key: string; retryable: boolean; cause?: unknown }) {
    super(message, { cause: init.cause });
    this.name = "IdemguardError";
    this.status = init.status;
    this.problem = init.problem;
    this.key = init.key;
    this.retryable = init.retryable;
  }
}

export const defaults = { waitSeconds: 10, maxAttempts: 6, baseDelayMs: 250, maxDelayMs: 10_000 };

/**
 * Runs the operation of `scope` on `input`, once per logical action.
 * Resolves with the envelope on success (first execution or replay); rejects
 * with an IdemguardError otherwise.
 */
export async function run(scope: string, input: unknown, options: RunOptions): Promise<RunResult> {
  const o = { ...defaults, ...options };
  const store = options.store ?? defaultStore();
  const doFetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  const sleep = options.sleep ?? abortableSleep;
  const random = options.random ?? Math.random;
  const body = JSON.stringify(input ?? {});
  const name = storageName(scope, options.action ?? canonicalJSON(input ?? {}));
  const key = acquireKey(store, name, options.newKey ?? newKey);
  const url = `${(options.baseUrl ?? "").replace(/\/+$/, "")}/v1/ops/${encodeURIComponent(scope)}`;
  const release = () => {
    if (readKey(store, name) === key) store.removeItem(name);
  };

  let lastError: IdemguardError | undefined;
  let retryAfterMs: number | undefined; // of the last 409/503
  for (let attempt = 1; attempt <= o.maxAttempts; attempt++) {
    if (attempt > 1) {
      await sleep(backoff(attempt - 1, retryAfterMs, o.baseDelayMs, o.maxDelayMs, random), options.signal);
    }
    const headers: Record<string, string> = {
      Authorization: `Bearer ${typeof options.token === "function" ? await options.token() : options.token}`,
      "Content-Type": "application/json",
      "Idempotency-Key": key,
    };
    if (o.waitSeconds > 0) headers["Prefer"] = `wait=${Math.floor(o.waitSeconds)}`;
    if (options.forceNew === true && attempt === 1) headers["Idempotency-Force-New"] = "true";

    let resp: Response;
    try {
      resp = await doFetch(url, { method: "POST", headers, body, signal: options.signal ?? null });
    } catch (err) {
      if (options.signal?.aborted) throw err; // the caller's abort: key kept
      lastError = new IdemguardError("network error", { key, retryable: true, cause: err });
      retryAfterMs = undefined;
      continue;
    }

    if (resp.ok) {
      const envelope = (await resp.json()) as Envelope;
      release();
      const completedAt = resp.headers.get("Idempotent-Completed-At") ?? undefined;
      const replaces = resp.headers.get("Idempotent-Replaces-Attempt");
      return {
        envelope,
        cached: envelope.cached === true || resp.headers.get("Idempotent-Replayed") === "true",
        key,
        keyRef: resp.headers.get("Idempotency-Key-Ref") ?? key,
        status: resp.status,
        attempts: attempt,
        ...(completedAt !== undefined ? { completedAt } : {}),
        ...(replaces !== null ? { replacedAttempt: Number(replaces) } : {}),
      };
    }
    const r = await refusal(resp, key, release);
    if (!r.retry) throw r.error;
    retryAfterMs = r.retryAfterMs;
    lastError = r.error;
  }
  throw lastError ?? new IdemguardError("no attempt made", { key, retryable: true });
}

/**
 * What a call makes of an answer that is not its result. Store down, or
 * the action still runs (elsewhere: another tab, the page before a
 * reload): retry the same key after Retry-After. Otherwise the error to
 * throw; when the outcome is known the key is released (a new call is a
 * new action), when it is not (a 401 after a network error, a 502 the same
 * key may retry, a 500) it is kept.
 */
export async function refusal(
  resp: Response, key: string, release: () => void,
): Promise<{ retry: boolean; retryAfterMs: number | undefined; error: IdemguardError }> {
  const problem = await readProblem(resp);
  const known = outcomeKnown(resp.status, problem);
  if (!known && (resp.status === 503 || resp.status === 409)) {
    return {
      retry: true,
      retryAfterMs: parseRetryAfter(resp.headers.get("Retry-After")),
      error: new IdemguardError(problem?.title ?? `HTTP ${resp.status}`, {
        status: resp.status, key, retryable: true, ...(problem ? { problem } : {}),
      }),
    };
  }
  if (known) release();
  return {
    retry: false,
    retryAfterMs: undefined,
    error: new IdemguardError(problem?.detail ?? problem?.title ?? `HTTP ${resp.status}`, {
      status: resp.status, key, retryable: !known, ...(problem ? { problem } : {}),
    }),
  };
}

/** Statuses the server answers before it claims a key, for reasons that are
 * the same for every request of the action (its scope, key and body): 400
 * (a malformed key or body, a missing key, input that fails the operation's
 * schema), 404 (unknown scope), 405, 413 (body too large), 415. An earlier
 * request with the same key got the same answer, so nothing ran under it. */
const beforeClaim = new Set([400, 404, 405, 413, 415]);

/** Stop reasons of a failure the server stored for good: every later request
 * with the key gets its replay ("use a new Idempotency-Key"). */
const finalStopReasons = new Set(["retry_limit", "abandoned", "invalid_input"]);

/** Whether an answer other than 2xx settles the action, so that its key may
 * be released: a failure stored for good, a 422 (the key was used with other
 * inputs: it can never run these), or an answer given before any claim.
 * Everything else leaves the outcome unknown and the key kept: 401 and 403
 * (refused before the claim, but an earlier request with this key, say one
 * whose answer was lost to a network error, may have run), 408, 409, 429, 5xx
 * other than a final failure, and any status not listed. */
export function outcomeKnown(status: number, problem?: Problem): boolean {
  if (problem?.type === `${problemPrefix}operation-failed`) return finalStopReasons.has(problem.stopReason);
  return status === 422 || beforeClaim.has(status);
}

const problemPrefix = "urn:idemguard:problem:";

/** The key kept for a pending action, or null: lets a page tell, after a
 * reload, that an action is still waiting for its answer. */
export function pendingKey(scope: string, input: unknown, options: Pick<RunOptions, "action" | "store"> = {}): string | null {
  const store = options.store ?? defaultStore();
  return readKey(store, storageName(scope, options.action ?? canonicalJSON(input ?? {})));
}

/** Reads a key's record (status, attempts, stored envelope). */
export async function lookup(scope: string, keyRef: string, options: Pick<RunOptions, "token" | "baseUrl" | "fetch" | "signal">): Promise<KeyRecord> {
  const doFetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  const url = `${(options.baseUrl ?? "").replace(/\/+$/, "")}/v1/ops/${encodeURIComponent(scope)}/keys/${encodeURIComponent(keyRef)}`;
  const token = typeof options.token === "function" ? await options.token() : options.token;
  const resp = await doFetch(url, { headers: { Authorization: `Bearer ${token}` }, signal: options.signal ?? null });
  if (!resp.ok) {
    const problem = await readProblem(resp);
    throw new IdemguardError(problem?.title ?? `HTTP ${resp.status}`, { status: resp.status, key: keyRef, retryable: false, ...(problem ? { problem } : {}) });
  }
  return (await resp.json()) as KeyRecord;
}

/** Resets a finished key's stored answer (DELETE …/keys/{keyRef}): the
 * next run with the key runs the operation afresh. Resolves with the key's
 * record as it was (status "reset", attemptCount the attempt it ended);
 * rejects with an IdemguardError: 403 when the scope does not allow
 * resets, 404 for an unknown key, 409 while the key runs (cancel it first). */
export async function resetKey(scope: string, keyRef: string, options: Pick<RunOptions, "token" | "baseUrl" | "fetch" | "signal">): Promise<KeyRecord> {
  const doFetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  const url = `${(options.baseUrl ?? "").replace(/\/+$/, "")}/v1/ops/${encodeURIComponent(scope)}/keys/${encodeURIComponent(keyRef)}`;
  const token = typeof options.token === "function" ? await options.token() : options.token;
  const resp = await doFetch(url, { method: "DELETE", headers: { Authorization: `Bearer ${token}` }, signal: options.signal ?? null });
  if (!resp.ok) {
    const problem = await readProblem(resp);
    throw new IdemguardError(problem?.title ?? `HTTP ${resp.status}`, { status: resp.status, key: keyRef, retryable: false, ...(problem ? { problem } : {}) });
  }
  return (await resp.json()) as KeyRecord;
}

/** The delay before retry number n (1-based): Retry-After when the server
 * sent one, else exponential with jitter; always capped by maxMs. */
export function backoff(n: number, retryAfterMs: number | undefined, baseMs: number, maxMs: number, random: () => number = Math.random): number {
  if (retryAfterMs !== undefined) return Math.min(retryAfterMs, maxMs);
  const exp = Math.min(maxMs, baseMs * 2 ** (n - 1));
  return Math.round(exp / 2 + (exp / 2) * random());
}

/** Retry-After in milliseconds: delay-seconds or an HTTP date. */
export function parseRetryAfter(v: string | null, now: number = Date.now()): number | undefined {
  if (v === null || v.trim() === "") return undefined;
  if (/^\d+$/.test(v.trim())) return Number(v.trim()) * 1000;
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : Math.max(0, t - now);
}

/** JSON with object keys sorted, so equal inputs name the same action. */
export function canonicalJSON(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map((x) => canonicalJSON(x === undefined ? null : x)).join(",")}]`;
  if (v !== null && typeof v === "object") {
    const entries = Object.entries(v as Record<string, unknown>)
      .filter(([, x]) => x !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, x]) => `${JSON.stringify(k)}:${canonicalJSON(x)}`).join(",")}}`;
  }
  return JSON.stringify(v) ?? "null";
}

const prefix = "idemguard:";

export function storageName(scope: string, action: string): string {
  return `${prefix}${scope}:${hash53(action)}`;
}

interface Stored {
  key: string;
  created: number;
}

export function readKey(store: KeyStore, name: string): string | null {
  const raw = store.getItem(name);
  if (raw === null) return null;
  try {
    const v = JSON.parse(raw) as Partial<Stored>;
    return typeof v.key === "string" && v.key !== "" ? v.key : null;
  } catch {
    return null;
  }
}

export function acquireKey(store: KeyStore, name: string, make: () => string): string {
  const existing = readKey(store, name);
  if (existing !== null) return existing;
  const key = make();
  store.setItem(name, JSON.stringify({ key, created: Date.now() } satisfies Stored));
  return key;
}

/** A fresh key: "web-" and 128 random bits in hex (valid Idempotency-Key
 * characters). crypto.getRandomValues works on plain-http origins too. */
export function newKey(): string {
  const b = new Uint8Array(16);
  globalThis.crypto.getRandomValues(b);
  return `web-${Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("")}`;
}

/** cyrb53: a short, stable name for an action (not a security boundary). */
function hash53(s: string): string {
  let h1 = 0xdeadbeef;
  let h2 = 0x41c6ce57;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return (4294967296 * (2097151 & h2) + (h1 >>> 0)).toString(36);
}

let memory: KeyStore | undefined;

export function defaultStore(): KeyStore {
  try {
    if (typeof sessionStorage !== "undefined") return sessionStorage;
  } catch {
    // Storage blocked (privacy settings): fall through.
  }
  if (memory === undefined) {
    const m = new Map<string, string>();
    memory = { getItem: (k) => m.get(k) ?? null, setItem: (k, v) => void m.set(k, v), removeItem: (k) => void m.delete(k) };
  }
  return memory;
}

export async function readProblem(resp: Response): Promise<Problem | undefined> {
  try {
    const v = (await resp.json()) as unknown;
    return v !== null && typeof v === "object" ? (v as Problem) : undefined;
  } catch {
    return undefined;
  }
}

export function abortableSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
