import { describe, expect, it } from "vitest";
import { cancelJob, keyHistory, IdemguardError, jobKey, monitorLink, readEvents, submitJob, watchJob, type JobEvent, type KeyStore } from "../src/index.js";

interface Recorded {
  url: string;
  method: string;
  headers: Headers;
}

function fakeServer(script: Array<Response | Error>) {
  const requests: Recorded[] = [];
  const fetch = (async (url: string | URL | Request, init?: RequestInit) => {
    requests.push({ url: String(url), method: init?.method ?? "GET", headers: new Headers(init?.headers) });
    const next = script.shift();
    if (next === undefined) throw new Error(`unexpected request #${requests.length}`);
    if (next instanceof Error) throw next;
    return next;
  }) as typeof globalThis.fetch;
  return { fetch, requests };
}

function memoryStore(): KeyStore {
  const m = new Map<string, string>();
  return { getItem: (k) => m.get(k) ?? null, setItem: (k, v) => void m.set(k, v), removeItem: (k) => void m.delete(k) };
}

const record = (status: string) => ({ ref: "job-1", scope: "jobs", status, attemptCount: 1 });
const ev = (id: string, event: string, status = "started") =>
  `id: ${id}\nevent: ${event}\ndata: ${JSON.stringify({ event, attempt: 1, at: "2026-01-01T00:00:00Z", record: record(status) })}\n\n`;
const stream = (...chunks: string[]) =>
  new Response(new ReadableStream({
    start(c) {
      const enc = new TextEncoder();
      for (const ch of chunks) c.enqueue(enc.encode(ch));
      c.close();
    },
  }), { status: 200, headers: { "Content-Type": "text/event-stream" } });
const noSleep = async () => {};

describe("submitJob", () => {
  it("sends Prefer: respond-async and keeps the key for the action", async () => {
    const store = memoryStore();
    const accepted = () => new Response(JSON.stringify(record("started")), {
      status: 202, headers: { Location: "/v1/ops/jobs/keys/k1", "Idempotency-Key-Ref": "k1" },
    });
    const srv = fakeServer([accepted(), accepted()]);
    const opts = { token: "t", fetch: srv.fetch, store, newKey: () => "k1" };
    const first = await submitJob("jobs", { q: 1 }, opts);
    expect(first).toMatchObject({ accepted: true, key: "k1", keyRef: "k1", location: "/v1/ops/jobs/keys/k1", status: 202 });
    expect(srv.requests[0]!.headers.get("Prefer")).toBe("respond-async");
    expect(srv.requests[0]!.headers.get("Idempotency-Key")).toBe("k1");
    expect(jobKey("jobs", { q: 1 }, { store })).toBe("k1");
    await submitJob("jobs", { q: 1 }, { ...opts, newKey: () => "other" });
    expect(srv.requests[1]!.headers.get("Idempotency-Key")).toBe("k1");
  });

  it("tells a submission that joined a running job, and gives the events link", async () => {
    const answer = (existing: boolean) => new Response(JSON.stringify({ ...record("started"), existing, eventsUrl: "/v1/ops/jobs/keys/k1/events" }), {
      status: 202,
      headers: {
        Location: "/v1/ops/jobs/keys/k1", "Idempotency-Key-Ref": "k1", Link: '</v1/ops/jobs/keys/k1/events>; rel="monitor"',
        ...(existing ? { "Idempotent-Existing": "true" } : {}),
      },
    });
    const srv = fakeServer([answer(false), answer(true)]);
    const opts = { token: "t", fetch: srv.fetch, store: memoryStore(), newKey: () => "k1" };
    expect(await submitJob("jobs", { q: 1 }, opts)).toMatchObject({ existing: false, eventsUrl: "/v1/ops/jobs/keys/k1/events" });
    expect(await submitJob("jobs", { q: 1 }, opts)).toMatchObject({ existing: true, eventsUrl: "/v1/ops/jobs/keys/k1/events" });
  });

  it("reads the monitor link among others", () => {
    expect(monitorLink('</a>; rel="next", </v1/x/events>; rel="monitor"')).toBe("/v1/x/events");
    expect(monitorLink("</a>; rel=next")).toBeUndefined();
    expect(monitorLink(null)).toBeUndefined();
  });
});

describe("watchJob", () => {
  it("parses the stream, skips comments and ends at the final event", async () => {
    const srv = fakeServer([stream(": keep-alive\n\n", ev("1.started.1", "started"), ev("1.alive.2", "al"), "", ev("1.succeeded.3", "succeeded", "succeeded"))]);
    const seen: JobEvent[] = [];
    for await (const e of watchJob("jobs", "job-1", { token: "t", fetch: srv.fetch })) seen.push(e);
    expect(seen.map((e) => [e.id, e.event])).toEqual([["1.started.1", "started"], ["1.alive.2", "al"], ["1.succeeded.3", "succeeded"]]);
    expect(srv.requests[0]!.url).toBe("/v1/ops/jobs/keys/job-1/events");
    expect(srv.requests[0]!.headers.get("Authorization")).toBe("Bearer t");
  });

  it("yields progress events with their numbers", async () => {
    const progress = (id: string, done: number) => {
      const p = { done, total: 10, fraction: done / 10, stage: "thinking", at: "2026-01-01T00:00:01Z" };
      return `id: ${id}\nevent: progress\ndata: ${JSON.stringify({ event: "progress", attempt: 1, at: p.at, record: { ...record("started"), progress: p }, progress: p })}\n\n`;
    };
    const srv = fakeServer([stream(ev("1.started.1", "started"), progress("1.progress.2", 3), progress("1.progress.3", 7), ev("1.succeeded.4", "succeeded", "succeeded"))]);
    const done: number[] = [];
    for await (const e of watchJob("jobs", "job-1", { token: "t", fetch: srv.fetch })) {
      if (e.event === "progress") done.push(e.progress!.done);
    }
    expect(done).toEqual([3, 7]);
  });

  it("reconnects with Last-Event-ID after the stream drops, and stops on 204", async () => {
    const srv = fakeServer([
      stream(ev("1.started.1", "started")),
      new Error("connection reset"),
      stream(ev("1.alive.2", "alive")),
      new Response(null, { status: 204 }),
    ]);
    const seen: string[] = [];
    for await (const e of watchJob("jobs", "job-1", { token: "t", fetch: srv.fetch, sleep: noSleep })) seen.push(e.id);
    expect(seen).toEqual(["1.started.1", "1.alive.2"]);
    expect(srv.requests.map((r) => r.headers.get("Last-Event-ID"))).toEqual([null, "1.started.1", "1.started.1", "1.alive.2"]);
  });

  it("gives up on 404 and 429 at once", async () => {
    const problem = (status: number) => new Response(JSON.stringify({ type: "urn:idemguard:problem:x", title: "x", status, ok: false, stopReason: "unknown" }), { status });
    for (const status of [404, 429]) {
      const srv = fakeServer([problem(status)]);
      const it = watchJob("jobs", "job-1", { token: "t", fetch: srv.fetch, sleep: noSleep });
      await expect(it.next()).rejects.toBeInstanceOf(IdemguardError);
      expect(srv.requests).toHaveLength(1);
    }
  });
});

describe("readEvents", () => {
  it("joins events split across chunks and CRLF lines", async () => {
    const whole = ev("2.started.9", "started").replace(/\n/g, "\r\n");
    const seen: string[] = [];
    for await (const e of readEvents(stream(whole.slice(0, 7), whole.slice(7, 30), whole.slice(30)))) seen.push(`${e.id} ${e.attempt}`);
    expect(seen).toEqual(["2.started.9 1"]);
  });
});

describe("cancelJob", () => {
  it("posts to the key's cancel route and reports a finished key", async () => {
    const srv = fakeServer([
      new Response(JSON.stringify({ ...record("started"), cancelRequested: true }), { status: 202 }),
      new Response(JSON.stringify({ type: "urn:idemguard:problem:key-finished", title: "Key finished", status: 409, ok: false, stopReason: "unknown" }), { status: 409 }),
    ]);
    expect(await cancelJob("jobs", "job-1", { token: "t", fetch: srv.fetch })).toMatchObject({ cancelRequested: true });
    expect(srv.requests[0]).toMatchObject({ url: "/v1/ops/jobs/keys/job-1/cancel", method: "POST" });
    await expect(cancelJob("jobs", "job-1", { token: "t", fetch: srv.fetch })).rejects.toMatchObject({ status: 409 });
  });
});

describe("keyHistory", () => {
  it("reads the key's history route and reports a key without events", async () => {
    const events = [
      { id: "a".repeat(32), kind: "claimed", at: "2026-01-01T00:00:00Z", tenant: "acme", scope: "jobs", keyPrefix: "0123456789abcdef", attempt: 1, actor: "key:billing" },
      { id: "b".repeat(32), kind: "replay", at: "2026-01-01T00:00:01Z", tenant: "acme", scope: "jobs", keyPrefix: "0123456789abcdef", attempt: 1, originalAt: "2026-01-01T00:00:00.5Z", replay: 1 },
    ];
    const srv = fakeServer([
      new Response(JSON.stringify({ events }), { status: 200 }),
      new Response(JSON.stringify({ type: "urn:idemguard:problem:key-not-found", title: "Key not found", status: 404, ok: false, stopReason: "unknown" }), { status: 404 }),
    ]);
    expect(await keyHistory("jobs", "job 1", { token: "t", fetch: srv.fetch })).toEqual(events);
    expect(srv.requests[0]).toMatchObject({ url: "/v1/ops/jobs/keys/job%201/history", method: "GET" });
    expect(srv.requests[0]!.headers.get("Authorization")).toBe("Bearer t");
    await expect(keyHistory("jobs", "job-1", { token: "t", fetch: srv.fetch })).rejects.toMatchObject({ status: 404 });
  });
});
