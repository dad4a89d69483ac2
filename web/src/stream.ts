// Streamed calls: runStream() is run() for an answer delivered as
// server-sent events ("stream": true), as an async iterator of events.
//
// The key is chosen and kept exactly as run() keeps it, from the same action
// name, so a plain run() and a runStream() of one input are one action: a
// reload in the middle of a stream resumes it with the same key, and the
// server answers with the running stream (in its process) or the stored one,
// from the first event. The key is released once the stream ended with
// [DONE] or with a failure the server stored for good.

import {
  IdemguardError,
  abortableSleep,
  acquireKey,
  backoff,
  canonicalJSON,
  defaultStore,
  defaults,
  newKey,
  outcomeKnown,
  parseRetryAfter,
  readKey,
  readProblem,
  storageName,
  type Problem,
  type RunOptions,
} from "./client.js";

/** One server-sent event of a streamed answer. */
export interface StreamEvent {
  /** The event type: "" for a chunk (the default type). */
  type: string;
  /** The event's data: for a chunk, a chat.completion.chunk JSON document. */
  data: string;
}

/** How a streamed call ended. */
export interface StreamResult {
  /** true when the events are a replay (or the running execution of an earlier request). */
  cached: boolean;
  key: string;
  keyRef: string;
  /** Requests made. */
  attempts: number;
  /** Events delivered, [DONE] not counted. */
  events: number;
}

/** The content delta of a chat.completion.chunk event, "" for any other event. */
export function contentOf(e: StreamEvent): string {
  if (e.type !== "") return "";
  try {
    const c = JSON.parse(e.data) as { choices?: { delta?: { content?: unknown } }[] };
    return (c.choices ?? []).map((ch) => (typeof ch.delta?.content === "string" ? ch.delta.content : "")).join("");
  } catch {
    return "";
  }
}

/**
 * Runs the operation of `scope` on `input` with "stream": true and yields
 * its events as they arrive; returns how it ended. Throws an IdemguardError
 * when the call fails: before the stream began as run() would; after it
 * began, with the problem of the stream's "error" event (or, when the
 * connection broke, retryable with the key kept: call again to get the
 * whole stream from its first event).
 */
export async function* runStream(scope: string, input: Record<string, unknown>, options: RunOptions): AsyncGenerator<StreamEvent, StreamResult> {
  const o = { ...defaults, ...options };
  const store = options.store ?? defaultStore();
  const doFetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  const sleep = options.sleep ?? abortableSleep;
  const random = options.random ?? Math.random;
  const body = JSON.stringify({ ...input, stream: true });
  // The action is the input without its delivery mode, as the server's key is.
  const name = storageName(scope, options.action ?? canonicalJSON(input ?? {}));
  const key = acquireKey(store, name, options.newKey ?? newKey);
  const url = `${(options.baseUrl ?? "").replace(/\/+$/, "")}/v1/ops/${encodeURIComponent(scope)}`;
  const release = () => {
    if (readKey(store, name) === key) store.removeItem(name);
  };

  let lastError: IdemguardError | undefined;
  let retryAfterMs: number | undefined;
  for (let attempt = 1; attempt <= o.maxAttempts; attempt++) {
    if (attempt > 1) {
      await sleep(backoff(attempt - 1, retryAfterMs, o.baseDelayMs, o.maxDelayMs, random), options.signal);
    }
    const headers: Record<string, string> = {
      Authorization: `Bearer ${typeof options.token === "function" ? await options.token() : options.token}`,
      "Content-Type": "application/json",
      Accept: "text/event-stream",
      "Idempotency-Key": key,
    };
    if (o.waitSeconds > 0) headers["Prefer"] = `wait=${Math.floor(o.waitSeconds)}`;
    let resp: Response;
    try {
      resp = await doFetch(url, { method: "POST", headers, body, signal: options.signal ?? null });
    } catch (err) {
      if (options.signal?.aborted) throw err;
      lastError = new IdemguardError("network error", { key, retryable: true, cause: err });
      retryAfterMs = undefined;
      continue;
    }
    if (resp.ok && resp.body !== null && (resp.headers.get("Content-Type") ?? "").startsWith("text/event-stream")) {
      const cached = resp.headers.get("Idempotent-Replayed") === "true";
      const keyRef = resp.headers.get("Idempotency-Key-Ref") ?? key;
      let events = 0;
      try {
        for await (const e of parseEvents(resp.body)) {
          if (e.type === "" && e.data === "[DONE]") {
            release();
            return { cached, key, keyRef, attempts: attempt, events };
          }
          if (e.type === "error") {
            let problem: Problem | undefined;
            try {
              problem = JSON.parse(e.data) as Problem;
            } catch {
              problem = undefined;
            }
            const known = outcomeKnown(problem?.status ?? 502, problem);
            if (known) release();
            throw new IdemguardError(problem?.detail ?? problem?.title ?? "the stream failed", {
              status: problem?.status ?? 502, key, retryable: !known, ...(problem ? { problem } : {}),
            });
          }
          events++;
          yield e;
        }
      } catch (err) {
        if (err instanceof IdemguardError || options.signal?.aborted) throw err;
        throw new IdemguardError("the stream broke off", { key, retryable: true, cause: err });
      }
      throw new IdemguardError("the stream ended before [DONE]", { key, retryable: true });
    }
    const problem = await readProblem(resp);
    const known = outcomeKnown(resp.status, problem);
    if (!known && (resp.status === 503 || resp.status === 409)) {
      retryAfterMs = parseRetryAfter(resp.headers.get("Retry-After"));
      lastError = new IdemguardError(problem?.title ?? `HTTP ${resp.status}`, {
        status: resp.status, key, retryable: true, ...(problem ? { problem } : {}),
      });
      continue;
    }
    if (known) release();
    throw new IdemguardError(problem?.detail ?? problem?.title ?? `HTTP ${resp.status}`, {
      status: resp.status, key, retryable: !known, ...(problem ? { problem } : {}),
    });
  }
  throw lastError ?? new IdemguardError("no attempt made", { key, retryable: true });
}

/** Parses a text/event-stream body into events (WHATWG: "event:" and "data:" fields, blank line ends one). */
export async function* parseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<StreamEvent> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let type = "";
  let data: string[] | undefined;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (line === "") {
          if (data !== undefined) yield { type, data: data.join("\n") };
          type = "";
          data = undefined;
        } else if (line.startsWith("event:")) {
          type = line.slice(6).replace(/^ /, "");
        } else if (line.startsWith("data:")) {
          (data ??= []).push(line.slice(5).replace(/^ /, ""));
        }
      }
    }
  } finally {
    reader.releaseLock();
  }
}
