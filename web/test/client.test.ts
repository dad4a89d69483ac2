import { describe, expect, it } from "vitest";
import { backoff, canonicalJSON, IdemguardError, outcomeKnown, parseRetryAfter, pendingKey, resetKey, run, type KeyStore, type RunOptions } from "../src/index.js";

/** A scripted server: each entry answers one request (a Response, or an
 * Error for a network failure); every request is recorded. */
function fakeServer(script: Array<Response | Error | ((req: Recorded) => Response)>) {
  const requests: Recorded[] = [];
  const fetch = (async (url: string | URL | Request, init?: RequestInit) => {
    const headers = new Headers(init?.headers);
    const req: Recorded = { url: String(url), method: init?.method ?? "GET", headers, body: String(init?.body ?? "") };
    requests.push(req);
    const next = script.shift();
    if (next === undefined) throw new Error(`unexpected request #${requests.length}`);
    if (next instanceof Error) throw next;
    return typeof next === "function" ? next(req) : next;
  }) as typeof globalThis.fetch;
  return { fetch, requests };
}

interface Recorded {
  url: string;
  method: string;
  headers: Headers;
  body: string;
}

function memoryStore(): KeyStore & { size(): number } {
  const m = new Map<string, string>();
  return {
    getItem: (k) => m.get(k) ?? null,
    setItem: (k, v) => void m.set(k, v),
    removeItem: (k) => void m.delete(k),
    size: () => m.size,
  };
}

const envelope = (cached: boolean, text = "hello") => ({ ok: true, stopReason: "completed", needsHuman: false, cached, data: { text } });

function ok(cached = false, headers: Record<string, string> = {}) {
  return new Response(JSON.stringify(envelope(cached)), {
    status: 200,
    headers: { "Content-Type": "application/json", "Idempotency-Key-Ref": "ref-from-server", ...headers },
  });
}

function problem(status: number, extra: Record<string, string> = {}, type = "in-progress", stopReason = "unknown") {
  return new Response(
    JSON.stringify({ type: `urn:idemguard:problem:${type}`, title: type, status, detail: `${type} detail`, ok: false, stopReason }),
    { status, headers: { "Content-Type": "application/problem+json", ...extra } },
  );
}

function setup(script: Parameters<typeof fakeServer>[0], extra: Partial<RunOptions> = {}) {
  const server = fakeServer(script);
  const store = memoryStore();
  const sleeps: number[] = [];
  let n = 0;
  const opts: RunOptions = {
    token: "tok",
    baseUrl: "http://api.test/",
    store,
    fetch: server.fetch,
    sleep: async (ms) => void sleeps.push(ms),
    random: () => 1,
    newKey: () => `key-${++n}`,
    ...extra,
  };
  return { server, store, sleeps, opts };
}

describe("run", () => {
  it("sends one request with the key, the token and Prefer: wait, and releases the key on success", async () => {
    const { server, store, opts } = setup([ok()]);
    const res = await run("demo", { prompt: "hi" }, opts);
    expect(res.envelope.data?.["text"]).toBe("hello");
    expect(res.cached).toBe(false);
    expect(res.key).toBe("key-1");
    expect(res.keyRef).toBe("ref-from-server");
    expect(res.attempts).toBe(1);
    const [req] = server.requests;
    expect(req?.url).toBe("http://api.test/v1/ops/demo");
    expect(req?.method).toBe("POST");
    expect(req?.headers.get("Idempotency-Key")).toBe("key-1");
    expect(req?.headers.get("Authorization")).toBe("Bearer tok");
    expect(req?.headers.get("Prefer")).toBe("wait=10");
    expect(req?.headers.get("Content-Type")).toBe("application/json");
    expect(JSON.parse(req?.body ?? "")).toEqual({ prompt: "hi" });
    expect(store.size()).toBe(0);
  });

  it("reuses the key across network errors and 503, honouring Retry-After", async () => {
    const { server, store, sleeps, opts } = setup([
      new TypeError("Failed to fetch"),
      problem(503, { "Retry-After": "3" }, "store-unavailable"),
      ok(),
    ]);
    const res = await run("demo", { prompt: "x" }, opts);
    expect(server.requests.map((r) => r.headers.get("Idempotency-Key"))).toEqual(["key-1", "key-1", "key-1"]);
    expect(sleeps).toEqual([250, 3000]); // backoff after the network error, then Retry-After
    expect(res.attempts).toBe(3);
    expect(store.size()).toBe(0);
  });

  it("caps Retry-After and the exponential backoff", async () => {
    const { sleeps, opts } = setup(
      [problem(503, { "Retry-After": "3600" }), new TypeError("x"), new TypeError("x"), new TypeError("x"), ok()],
      { maxDelayMs: 1000 },
    );
    await run("demo", {}, opts);
    expect(sleeps).toEqual([1000, 500, 1000, 1000]);
    expect(backoff(10, undefined, 250, 10_000, () => 0)).toBe(5000); // jitter: half to full
    expect(parseRetryAfter("Wed, 21 Oct 2015 07:28:10 GMT", Date.parse("Wed, 21 Oct 2015 07:28:00 GMT"))).toBe(10_000);
    expect(parseRetryAfter("soon")).toBeUndefined();
  });

  it("keeps the key when every attempt fails, so the next call resumes it", async () => {
    const { server, store, opts } = setup([new TypeError("x"), new TypeError("x"), ok(true)], { maxAttempts: 2 });
    const err = await run("demo", { a: 1 }, opts).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IdemguardError);
    expect((err as IdemguardError).retryable).toBe(true);
    expect(store.size()).toBe(1);
    expect(pendingKey("demo", { a: 1 }, { store })).toBe("key-1");
    // A reload later: the same input finds the same key.
    const res = await run("demo", { a: 1 }, opts);
    expect(res.key).toBe("key-1");
    expect(res.cached).toBe(true);
    expect(server.requests.map((r) => r.headers.get("Idempotency-Key"))).toEqual(["key-1", "key-1", "key-1"]);
    expect(store.size()).toBe(0);
  });

  it("on 409 waits (Prefer: wait) with the same key and returns the replay", async () => {
    const { server, sleeps, opts } = setup([problem(409, { "Retry-After": "1" }), ok(true, { "Idempotent-Replayed": "true", "Idempotent-Completed-At": "2026-01-01T00:00:00Z" })], { waitSeconds: 5 });
    const res = await run("demo", {}, opts);
    expect(res.cached).toBe(true);
    expect(res.completedAt).toBe("2026-01-01T00:00:00Z");
    expect(sleeps).toEqual([1000]);
    expect(server.requests.map((r) => [r.headers.get("Idempotency-Key"), r.headers.get("Prefer")])).toEqual([
      ["key-1", "wait=5"],
      ["key-1", "wait=5"],
    ]);
  });

  it("gives a double click one key: both calls share it and the second gets the replay", async () => {
    const { server, store, opts } = setup([ok(false), ok(true, { "Idempotent-Replayed": "true" })]);
    const [a, b] = await Promise.all([run("demo", { p: "same" }, opts), run("demo", { p: "same" }, opts)]);
    expect(a.key).toBe(b.key);
    expect([a.cached, b.cached]).toEqual([false, true]);
    expect(new Set(server.requests.map((r) => r.headers.get("Idempotency-Key"))).size).toBe(1);
    expect(store.size()).toBe(0);
  });

  it("names actions by canonical input, or by the action option", async () => {
    const { store, opts } = setup([new TypeError("x")], { maxAttempts: 1 });
    await run("demo", { b: 2, a: 1 }, opts).catch(() => undefined);
    expect(pendingKey("demo", { a: 1, b: 2 }, { store })).toBe("key-1");
    expect(pendingKey("demo", { a: 1, b: 3 }, { store })).toBeNull();
    expect(pendingKey("other", { a: 1, b: 2 }, { store })).toBeNull();
    expect(canonicalJSON({ b: [1, { d: 1, c: 2 }], a: "x" })).toBe('{"a":"x","b":[1,{"c":2,"d":1}]}');

    const named = setup([new TypeError("x")], { maxAttempts: 1, action: "generate:form-1" });
    await run("demo", { v: 1 }, named.opts).catch(() => undefined);
    expect(pendingKey("demo", { v: 2 }, { store: named.store, action: "generate:form-1" })).toBe("key-1");
  });

  it("releases the key on 422 and does not retry", async () => {
    const { server, store, opts } = setup([problem(422, {}, "idempotency-key-reused")]);
    const err = (await run("demo", {}, opts).catch((e: unknown) => e)) as IdemguardError;
    expect(err).toBeInstanceOf(IdemguardError);
    expect(err.status).toBe(422);
    expect(err.retryable).toBe(false);
    expect(err.problem?.type).toBe("urn:idemguard:problem:idempotency-key-reused");
    expect(server.requests).toHaveLength(1);
    expect(store.size()).toBe(0);
  });

  it.each([
    [502, "retry_limit"],
    [502, "abandoned"],
    [422, "invalid_input"],
  ])("releases the key on a failure stored for good (%i %s)", async (status, stopReason) => {
    const { server, store, opts } = setup([problem(status, {}, "operation-failed", stopReason)]);
    const err = (await run("demo", {}, opts).catch((e: unknown) => e)) as IdemguardError;
    expect(err.status).toBe(status);
    expect(err.retryable).toBe(false);
    expect(server.requests).toHaveLength(1);
    expect(store.size()).toBe(0);
  });

  it.each([
    [400, "invalid-body"],
    [400, "invalid-idempotency-key"],
    [400, "missing-idempotency-key"],
    [400, "invalid-input"],
    [404, "unknown-scope"],
    [405, "method-not-allowed"],
    [413, "body-too-large"],
    [415, "unsupported-media-type"],
  ])("releases the key on a %i %s, answered before any claim, and does not retry", async (status, type) => {
    const { server, store, sleeps, opts } = setup([problem(status, {}, type)]);
    const err = (await run("demo", {}, opts).catch((e: unknown) => e)) as IdemguardError;
    expect(err.status).toBe(status);
    expect(err.retryable).toBe(false);
    expect(server.requests).toHaveLength(1);
    expect(sleeps).toEqual([]);
    expect(store.size()).toBe(0);
  });

  it.each([
    [401, "unauthorized", "unknown"],
    [403, "forbidden", "unknown"],
    [408, "timeout", "unknown"],
    [429, "rate-limited", "unknown"],
    [500, "internal", "unknown"],
    [502, "operation-failed", "provider_error"],
    [502, "operation-failed", "timeout"],
    [502, "operation-failed", "rate_limited"],
    [502, "operation-failed", "unknown"],
    [504, "gateway-timeout", "unknown"],
  ])("keeps the key on a %i %s (%s): the outcome is unknown", async (status, type, stopReason) => {
    const { server, store, opts } = setup([problem(status, {}, type, stopReason)]);
    const err = (await run("demo", { a: 1 }, opts).catch((e: unknown) => e)) as IdemguardError;
    expect(err).toBeInstanceOf(IdemguardError);
    expect(err.status).toBe(status);
    expect(err.retryable).toBe(true);
    expect(server.requests).toHaveLength(1);
    expect(pendingKey("demo", { a: 1 }, { store })).toBe("key-1");
  });

  it("keeps the key on an answer that is not a problem (a proxy's 502 page)", async () => {
    const { store, opts } = setup([new Response("<html>Bad Gateway</html>", { status: 502, headers: { "Content-Type": "text/html" } })]);
    const err = (await run("demo", {}, opts).catch((e: unknown) => e)) as IdemguardError;
    expect(err.status).toBe(502);
    expect(err.problem).toBeUndefined();
    expect(err.retryable).toBe(true);
    expect(store.size()).toBe(1);
  });

  it("network error, then 401, then a retry: one execution, the same key every time", async () => {
    // A server with the guard's semantics: the first request with a key runs
    // the operation, later ones replay it; a bad token is refused before the
    // key is looked at.
    const executed = new Map<string, number>();
    let executions = 0;
    let answerLost = true;
    const keys: Array<string | null> = [];
    const fetch = (async (_url: string | URL | Request, init?: RequestInit) => {
      const headers = new Headers(init?.headers);
      const key = headers.get("Idempotency-Key");
      keys.push(key);
      if (headers.get("Authorization") !== "Bearer fresh") return problem(401, {}, "unauthorized");
      if (key === null) throw new Error("no key sent");
      const replay = executed.has(key);
      if (!replay) executed.set(key, ++executions);
      if (answerLost) {
        answerLost = false;
        throw new TypeError("Failed to fetch"); // it ran; the answer never arrived
      }
      return ok(replay, replay ? { "Idempotent-Replayed": "true" } : {});
    }) as typeof globalThis.fetch;

    // The token expires between the lost answer and the retry.
    const tokens = ["fresh", "expired"];
    const { store, opts } = setup([], { fetch, token: () => tokens.shift() ?? "fresh" });
    const err = (await run("demo", { prompt: "once" }, opts).catch((e: unknown) => e)) as IdemguardError;
    expect(err).toBeInstanceOf(IdemguardError);
    expect(err.status).toBe(401);
    expect(err.retryable).toBe(true);
    expect(pendingKey("demo", { prompt: "once" }, { store })).toBe("key-1");

    // The user signs in again and clicks again (or the page reloads): the same key.
    const res = await run("demo", { prompt: "once" }, { ...opts, token: "fresh" });
    expect(res.cached).toBe(true);
    expect(res.key).toBe("key-1");
    expect(keys).toEqual(["key-1", "key-1", "key-1"]);
    expect(executions).toBe(1);
    expect(store.size()).toBe(0);
  });

  it("outcomeKnown: only an answer that settles the action releases its key", () => {
    const p = (type: string, stopReason: string) => ({ type: `urn:idemguard:problem:${type}`, title: "t", status: 0, ok: false, stopReason }) as Parameters<typeof outcomeKnown>[1];
    expect(outcomeKnown(400)).toBe(true);
    expect(outcomeKnown(422, p("idempotency-key-reused", "invalid_input"))).toBe(true);
    expect(outcomeKnown(401, p("unauthorized", "unknown"))).toBe(false);
    expect(outcomeKnown(409, p("in-progress", "in_progress"))).toBe(false);
    expect(outcomeKnown(503, p("store-unavailable", "unknown"))).toBe(false);
    expect(outcomeKnown(502, p("operation-failed", "retry_limit"))).toBe(true);
    expect(outcomeKnown(502, p("operation-failed", "provider_error"))).toBe(false);
    expect(outcomeKnown(400, p("operation-failed", "provider_error"))).toBe(false);
  });

  it("asks a token function before each request", async () => {
    let n = 0;
    const { server, opts } = setup([problem(503), ok()], { token: async () => `jwt-${++n}` });
    await run("demo", {}, opts);
    expect(server.requests.map((r) => r.headers.get("Authorization"))).toEqual(["Bearer jwt-1", "Bearer jwt-2"]);
  });

  it("stops on abort and keeps the key", async () => {
    const ctl = new AbortController();
    const { store, opts } = setup([], {
      signal: ctl.signal,
      fetch: (async () => {
        ctl.abort();
        throw new DOMException("aborted", "AbortError");
      }) as typeof fetch,
    });
    await expect(run("demo", {}, opts)).rejects.toThrow("aborted");
    expect(store.size()).toBe(1);
  });
});

describe("forceNew and resetKey", () => {
  it("forceNew sends Idempotency-Force-New on the first request only and reports the replaced attempt", async () => {
    const { opts, server } = setup([new Error("offline"), ok(false, { "Idempotent-Replaces-Attempt": "2" })], { forceNew: true });
    const res = await run("chat", { q: 1 }, opts);
    expect(server.requests[0]!.headers.get("Idempotency-Force-New")).toBe("true");
    expect(server.requests[1]!.headers.get("Idempotency-Force-New")).toBeNull();
    expect(res.replacedAttempt).toBe(2);
  });

  it("resetKey sends DELETE to the key and returns its record; a refusal is an IdemguardError", async () => {
    const record = { ref: "k1", scope: "chat", status: "reset", attemptCount: 1 };
    const server = fakeServer([
      new Response(JSON.stringify(record), { status: 200, headers: { "Content-Type": "application/json" } }),
      problem(403, {}, "reset-forbidden"),
    ]);
    const o = { token: "tok", baseUrl: "http://api.test", fetch: server.fetch };
    expect(await resetKey("chat", "k1", o)).toEqual(record);
    expect(server.requests[0]!.method).toBe("DELETE");
    expect(server.requests[0]!.url).toBe("http://api.test/v1/ops/chat/keys/k1");
    await expect(resetKey("chat", "k1", o)).rejects.toMatchObject({ status: 403, retryable: false });
  });
});
