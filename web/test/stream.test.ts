import { describe, expect, it } from "vitest";
import { contentOf, IdemguardError, pendingKey, run, runStream, type KeyStore, type RunOptions, type StreamEvent } from "../src/index.js";

function memoryStore(): KeyStore & { size(): number } {
  const m = new Map<string, string>();
  return { getItem: (k) => m.get(k) ?? null, setItem: (k, v) => void m.set(k, v), removeItem: (k) => void m.delete(k), size: () => m.size };
}

const withId = (id: string, event: string) => `id: ${id}\n${event}`;
const chunk = (content: string) => `data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"finish_reason":null}]}\n\n`;

/** A text/event-stream Response whose body arrives in the given pieces. */
function sse(pieces: string[], headers: Record<string, string> = {}, end = true): Response {
  const enc = new TextEncoder();
  let i = 0;
  // Pulled piece by piece, so that a connection that breaks (end false)
  // breaks after the client has read every piece.
  const body = new ReadableStream<Uint8Array>({
    pull(c) {
      if (i < pieces.length) c.enqueue(enc.encode(pieces[i++]!));
      else if (end) c.close();
      else c.error(new TypeError("network error"));
    },
  });
  return new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream", ...headers } });
}

function fakeServer(script: Response[]) {
  const requests: { headers: Headers; body: string }[] = [];
  const fetch = (async (_url: string | URL | Request, init?: RequestInit) => {
    requests.push({ headers: new Headers(init?.headers), body: String(init?.body ?? "") });
    const next = script.shift();
    if (next === undefined) throw new Error("unexpected request");
    return next;
  }) as typeof globalThis.fetch;
  return { fetch, requests };
}

const input = { messages: [{ role: "user", content: "hi" }] };
const opts = (store: KeyStore, fetch: typeof globalThis.fetch): RunOptions => ({ token: "t", store, fetch, sleep: async () => {}, newKey: () => "web-k1" });

async function collect(it: AsyncGenerator<StreamEvent, unknown>): Promise<{ events: StreamEvent[]; result: unknown }> {
  const events: StreamEvent[] = [];
  for (;;) {
    const n = await it.next();
    if (n.done) return { events, result: n.value };
    events.push(n.value);
  }
}

describe("runStream", () => {
  it("yields the chunks as they come, ends at [DONE] and releases the key", async () => {
    const store = memoryStore();
    const srv = fakeServer([sse([chunk("Hel"), chunk("lo") + "data: [DO", "NE]\n\n"], { "Idempotency-Key-Ref": "web-k1" })]);
    const { events, result } = await collect(runStream("chat", input, opts(store, srv.fetch)));
    expect(events.map(contentOf).join("")).toBe("Hello");
    expect(result).toMatchObject({ cached: false, key: "web-k1", events: 2 });
    expect(JSON.parse(srv.requests[0]!.body)).toEqual({ ...input, stream: true });
    expect(srv.requests[0]!.headers.get("Idempotency-Key")).toBe("web-k1");
    expect(store.size()).toBe(0);
  });

  it("uses the key of the same action as run(), so a plain call and a stream are one action", async () => {
    const store = memoryStore();
    const srv = fakeServer([new Response("{}", { status: 503 })]);
    await expect(run("chat", input, { ...opts(store, srv.fetch), maxAttempts: 1, newKey: () => "web-plain" })).rejects.toBeInstanceOf(IdemguardError);
    expect(pendingKey("chat", input, { store })).toBe("web-plain");
    const srv2 = fakeServer([sse([chunk("x"), "data: [DONE]\n\n"])]);
    await collect(runStream("chat", input, opts(store, srv2.fetch)));
    expect(srv2.requests[0]!.headers.get("Idempotency-Key")).toBe("web-plain");
  });

  it("an error event is an IdemguardError; a retryable failure keeps the key", async () => {
    const store = memoryStore();
    const problem = { type: "urn:idemguard:problem:operation-failed", title: "Operation failed", status: 502, ok: false, stopReason: "provider_error", cached: false };
    const srv = fakeServer([sse([chunk("part"), `event: error\ndata: ${JSON.stringify(problem)}\n\n`])]);
    const err = await collect(runStream("chat", input, opts(store, srv.fetch))).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IdemguardError);
    expect((err as IdemguardError).retryable).toBe(true);
    expect((err as IdemguardError).problem?.stopReason).toBe("provider_error");
    expect(pendingKey("chat", input, { store })).toBe("web-k1");
  });

  it("a stream that breaks off keeps the key, and the next call sends it again", async () => {
    const store = memoryStore();
    const srv = fakeServer([sse([chunk("pa")], {}, false), sse([chunk("pa"), chunk("rt"), "data: [DONE]\n\n"], { "Idempotent-Replayed": "true" })]);
    const err = await collect(runStream("chat", input, opts(store, srv.fetch))).catch((e: unknown) => e);
    expect((err as IdemguardError).retryable).toBe(true);
    const again = await collect(runStream("chat", input, opts(store, srv.fetch)));
    expect(again.events.map(contentOf).join("")).toBe("part");
    expect(again.result).toMatchObject({ cached: true });
    expect(srv.requests.map((r) => r.headers.get("Idempotency-Key"))).toEqual(["web-k1", "web-k1"]);
    expect(store.size()).toBe(0);
  });

  it("retries a 409 with the same key after Retry-After", async () => {
    const store = memoryStore();
    const srv = fakeServer([new Response(JSON.stringify({ status: 409, stopReason: "in_progress" }), { status: 409, headers: { "Retry-After": "1" } }), sse([chunk("ok"), "data: [DONE]\n\n"])]);
    const { events } = await collect(runStream("chat", input, opts(store, srv.fetch)));
    expect(events.map(contentOf).join("")).toBe("ok");
    expect(srv.requests).toHaveLength(2);
  });

  it("resumes a dropped connection with Last-Event-ID: every event once, in order", async () => {
    const store = memoryStore();
    const srv = fakeServer([
      sse([withId("1-1", chunk("Hel")), withId("1-2", chunk("lo"))], {}, false),
      sse([withId("1-3", chunk(" world")), "data: [DONE]\n\n"], { "Idempotent-Replayed": "true" }),
    ]);
    const { events, result } = await collect(runStream("chat", input, opts(store, srv.fetch)));
    expect(events.map(contentOf).join("")).toBe("Hello world");
    expect(events.map((e) => e.id)).toEqual(["1-1", "1-2", "1-3"]);
    expect(srv.requests.map((r) => r.headers.get("Last-Event-ID"))).toEqual([null, "1-2"]);
    expect(srv.requests.map((r) => r.headers.get("Idempotency-Key"))).toEqual(["web-k1", "web-k1"]);
    expect(result).toMatchObject({ cached: false, events: 3, resumed: 1, attempts: 2 });
    expect(store.size()).toBe(0);
  });

  it("keeps resuming while each connection brings new events, and gives up after maxAttempts without one", async () => {
    const store = memoryStore();
    const drops = Array.from({ length: 8 }, (_, i) => sse([withId(`1-${i + 1}`, chunk(String(i)))], {}, false));
    const srv = fakeServer([...drops, sse([withId("1-9", chunk("8")), "data: [DONE]\n\n"])]);
    const { events } = await collect(runStream("chat", input, { ...opts(store, srv.fetch), maxAttempts: 2 }));
    expect(events.map(contentOf).join("")).toBe("012345678");
    expect(srv.requests.at(-1)!.headers.get("Last-Event-ID")).toBe("1-8");

    const stuck = fakeServer([sse([withId("1-1", chunk("a"))], {}, false), sse([], {}, false), sse([], {}, false)]);
    const err = await collect(runStream("chat", { other: 1 }, { ...opts(store, stuck.fetch), maxAttempts: 2 })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(IdemguardError);
    expect((err as IdemguardError).retryable).toBe(true);
    expect(stuck.requests).toHaveLength(3);
  });

  it("yields the server's restart event, after which the content starts again", async () => {
    const store = memoryStore();
    const srv = fakeServer([
      sse([withId("1-1", chunk("stale "))], {}, false),
      sse([`event: restart\ndata: {"restart":"superseded","attempt":2}\n\n`, withId("2-1", chunk("fresh")), "data: [DONE]\n\n"],
        { "Idempotent-Stream-Restart": "superseded" }),
    ]);
    let text = "";
    const { events, result } = await collect(runStream("chat", input, opts(store, srv.fetch)));
    for (const e of events) text = e.type === "restart" ? "" : text + contentOf(e);
    expect(text).toBe("fresh");
    expect(events.map((e) => e.type)).toEqual(["", "restart", ""]);
    expect(result).toMatchObject({ events: 1, resumed: 1 });
  });
});
