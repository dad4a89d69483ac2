// Drives the demo page of a running `idemguard serve` (development mode),
// reached through a TCP proxy, in headless Chromium: Stream shows the
// answer word by word; in the middle of the stream every connection through
// the proxy is cut (the --cut URL, served by the Go test, closes them). The
// page's client must reconnect on its own with Last-Event-ID and show the
// whole answer, each word once, without a reload. Prints what it saw as one
// JSON line; integration/browser_test.go checks the server's side.
//
// Usage: node browser/resume.browser.mjs --url http://127.0.0.1:8081 --cut http://127.0.0.1:9000/cut
// Env: CHROMIUM (default /usr/bin/chromium).
import { check, cli, launch, newest, streamSome, untilDone } from "./harness.mjs";

const { args, api } = cli("node browser/resume.browser.mjs --url http://127.0.0.1:8081 --cut http://127.0.0.1:9000/cut", "cut");

const browser = await launch();
const out = { posts: [] };
try {
  const page = await browser.newPage();
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("request", (req) => {
    if (req.method() === "POST" && req.url().endsWith("/v1/ops/demo")) {
      const h = req.headers();
      out.posts.push({ key: h["idempotency-key"] ?? null, lastEventId: h["last-event-id"] ?? null });
    }
  });
  await streamSome(page, api); // some words have arrived, and the stream is still running
  const partial = await newest(page);
  const resp = await fetch(args.cut, { method: "POST" });
  check(resp.ok, `the connections were cut: ${resp.status}`);

  await untilDone(page);
  const done = await newest(page);
  check(!done.error, `the stream ended without an error: ${JSON.stringify(done)}`);
  check(done.reconnects >= 1, `the client reconnected: ${JSON.stringify(done)}`);
  check(done.answer.startsWith(partial.answer), `the answer goes on from what was shown: ${JSON.stringify([partial, done])}`);
  check(out.posts.length >= 2 && out.posts[0].lastEventId === null && out.posts.at(-1).lastEventId !== null,
    `the reconnection sent Last-Event-ID: ${JSON.stringify(out.posts)}`);
  check(pageErrors.length === 0, `no errors in the page: ${pageErrors.join("; ")}`);
  Object.assign(out, { key: done.key, partial: partial.answer, answer: done.answer, reconnects: done.reconnects, ok: true });
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
