// Drives the demo page of a running `idemguard serve` (development mode) in
// headless Chromium: Stream shows the answer word by word; the page is
// reloaded in the middle of the stream and must resume the action with the
// same key and show the whole answer from its first word, as the replay of
// the execution the first page started. Prints what it saw as one JSON line;
// integration/browser_test.go checks the server's side.
//
// Usage: node browser/stream.browser.mjs --url http://127.0.0.1:8080
// Env: CHROMIUM (default /usr/bin/chromium).
import { check, cli, launch, newest, streamSome, untilDone, wait } from "./harness.mjs";

const { api } = cli("node browser/stream.browser.mjs --url http://127.0.0.1:8080");

const browser = await launch();
const out = { keys: [] };
try {
  const page = await browser.newPage();
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("request", (req) => {
    if (req.method() === "POST" && req.url().endsWith("/v1/ops/demo")) out.keys.push(req.headers()["idempotency-key"] ?? null);
  });
  await streamSome(page, api); // some words have arrived, and the stream is still running
  const partial = await newest(page);
  check(partial.state === "streaming", `the answer is still streaming: ${JSON.stringify(partial)}`);

  await page.reload(wait);
  await untilDone(page);
  const resumed = await newest(page);
  check(!resumed.error && resumed.resumed, `the stream resumed after the reload: ${JSON.stringify(resumed)}`);
  check(resumed.replay === "true", `the resumed stream is the first execution's, not a new one: ${JSON.stringify(resumed)}`);
  check(resumed.key === partial.key, `one key before and after the reload: ${JSON.stringify([partial, resumed])}`);
  check(resumed.answer.startsWith(partial.answer), `the resumed stream starts from the first word: ${JSON.stringify([partial, resumed])}`);
  await page.waitForSelector('#status[data-state="idle"]', { ...wait, state: "attached" });
  check(pageErrors.length === 0, `no errors in the page: ${pageErrors.join("; ")}`);
  Object.assign(out, { key: partial.key, partial: partial.answer, answer: resumed.answer, replay: true, ok: true });
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
