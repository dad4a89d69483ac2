// Streamed calls: runStream() is run() for an answer delivered as
// server-sent events ("stream": true), as an async iterator of events.
//
// The key is chosen and kept exactly as run() keeps it, from the same action
// name, so a plain run() and a runStream() of one input are one action: a
// reload in the middle of a stream resumes it with the same key, and the
// server answers with the running stream (in its process) or the stored one,
// from the first event. The key is released once the stream ended with
// [DONE] or with a failure the server stored for good.
//
// A connection that drops in the middle of a stream is reopened at once by
// the same call, with Last-Event-ID: the id of the last event received
// ("<attempt>-<execution>-<n>"). The server sends what follows it, so the events arrive
// whole and each once. When it cannot (the events came from an attempt that
// was replaced), it starts again from the first event and says so with a
// "restart" event, which runStream yields: drop what the earlier events
// built.

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
  readKey,
  refusal,
  storageName,
  type Problem,
  type RunOptions,
} from "./client.js";

/** One server-sent event of a streamed answer. */
export interface StreamEvent {
  /** The event's id, "<attempt>-<execution>-<n>" ("" for none): where a reconnection resumes. */
  id?: string;
  /** The event type: "" for a chunk (the default type); "restart" when the
   * events start again from the first (drop what the earlier ones built). */
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
  /** Events delivered, [DONE] and restarts not counted. */
  events: number;
  /** Connections that dropped mid-stream and were resumed. */
  resumed: number;
}

/** The content delta of a chat.completion.chunk event, "" for any other
 * event (a "restart" event voids the content before it). */
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
 * its events as they arrive; returns how it ended. A connection that drops
 * mid-stream is reopened with Last-Event-ID and the stream goes on after the
 * last event received (up to maxAttempts reconnections in a row without a
 * new event). Throws an IdemguardError when the call fails: before the
 * stream began as run() would; after it began, with the problem of the
 * stream's "error" event (or, when it could not resume, retryable with the
 * key kept: call again to get the whole stream from its first event).
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
  let lastId: string | undefined; // the id of the last event yielded
  let events = 0;
  let cached: boolean | undefined;
  let resumed = 0;
  let requests = 0;
  for (let attempt = 1; attempt <= o.maxAttempts; attempt++) {
    if (attempt > 1) {
      await sleep(backoff(attempt - 1, retryAfterMs, o.baseDelayMs, o.maxDelayMs, random), options.signal);
    }
    requests++;
    const headers: Record<string, string> = {
      Authorization: `Bearer ${typeof options.token === "function" ? await options.token() : options.token}`,
      "Content-Type": "application/json",
      Accept: "text/event-stream",
      "Idempotency-Key": key,
    };
    if (o.waitSeconds > 0) headers["Prefer"] = `wait=${Math.floor(o.waitSeconds)}`;
    if (lastId !== undefined) headers["Last-Event-ID"] = lastId;
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
      cached ??= resp.headers.get("Idempotent-Replayed") === "true";
      const keyRef = resp.headers.get("Idempotency-Key-Ref") ?? key;
      if (lastId !== undefined) resumed++;
      let broke: IdemguardError | undefined;
      try {
        for await (const e of parseEvents(resp.body)) {
          if (e.type === "" && e.data === "[DONE]") {
            release();
            return { cached, key, keyRef, attempts: requests, events, resumed };
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
          if (e.type === "restart") {
            events = 0;
          } else {
            events++;
            attempt = 0; // progress: the reconnections in a row start again
          }
          if (e.id !== undefined) lastId = e.id;
          yield e;
        }
      } catch (err) {
        if (err instanceof IdemguardError || options.signal?.aborted) throw err;
        broke = new IdemguardError("the stream broke off", { key, retryable: true, cause: err });
      }
      lastError = broke ?? new IdemguardError("the stream ended before [DONE]", { key, retryable: true });
      // Resume after the last event received; without an id (a server that
      // sends none) only a stream that delivered nothing can be asked again.
      if (lastId === undefined && events > 0) throw lastError;
      retryAfterMs = undefined;
      continue;
    }
    const r = await refusal(resp, key, release);
    if (!r.retry) throw r.error;
    retryAfterMs = r.retryAfterMs;
    lastError = r.error;
  }
  throw lastError ?? new IdemguardError("no attempt made", { key, retryable: true });
}

/** Parses a text/event-stream body into events (WHATWG: "id:", "event:" and "data:" fields, blank line ends one). */
export async function* parseEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<StreamEvent> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let type = "";
  let id: string | undefined;
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
          if (data !== undefined) yield id === undefined ? { type, data: data.join("\n") } : { id, type, data: data.join("\n") };
          type = "";
          id = undefined;
          data = undefined;
        } else if (line.startsWith("id:")) {
          id = line.slice(3).replace(/^ /, "");
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
