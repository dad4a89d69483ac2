// Drives the demo page of a running `idemguard serve` (development mode) in
// headless Chromium with playwright-core, and prints what the page showed as
// one JSON line; integration/browser_test.go starts the built binary, runs
// this script and checks the server's side (key lookup, /metrics, log).
//
// Usage: node browser/demo.browser.mjs --url http://127.0.0.1:8080 --out DIR
// Env: CHROMIUM (default /usr/bin/chromium).
//
// 1. A double click on Generate: two results, the same answer and key, one
//    first execution and one replay.
// 2. A reload while the call runs: after the reload the page resumes the
//    action with the same key and shows the answer.
// 3. A fetch from another loopback origin: the CORS preflight passes and the
//    idempotency headers are readable.
import { createServer } from "node:http";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { check, cli, launch, wait } from "./harness.mjs";

const { args, api } = cli("node browser/demo.browser.mjs --url http://127.0.0.1:8080 --out DIR", "out");
await mkdir(args.out, { recursive: true });
const tag = Math.random().toString(36).slice(2, 8);

// The results the page lists, newest first.
async function results(page) {
  return page.$$eval("#results .result", (items) =>
    items.map((li) => ({
      answer: li.querySelector(".answer")?.textContent ?? "",
      replay: li.dataset.replay === "true",
      key: li.querySelector(".key")?.textContent ?? "",
      error: li.classList.contains("error"),
      resumed: (li.textContent ?? "").includes("resumed after reload"),
    })),
  );
}

const browser = await launch();
const other = createServer((_, res) => {
  res.writeHead(200, { "Content-Type": "text/html" });
  res.end("<!doctype html><title>another origin</title><p>another loopback origin</p>");
});
const out = {};
try {
  const context = await browser.newContext({ viewport: { width: 900, height: 760 } });
  const page = await context.newPage();
  const consoleErrors = [];
  page.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
  page.on("pageerror", (e) => consoleErrors.push(String(e)));

  // 1. Double click.
  await page.goto(`${api}/`, wait);
  await page.fill("#prompt", `Double click ${tag}`);
  await page.dblclick("#generate");
  await page.waitForFunction(() => document.querySelectorAll("#results .result").length >= 2, null, wait);
  const dbl = await results(page);
  check(dbl.length === 2, `two results after a double click, got ${JSON.stringify(dbl)}`);
  check(dbl.every((r) => !r.error), `no errors: ${JSON.stringify(dbl)}`);
  check(dbl[0].answer === dbl[1].answer && dbl[0].answer !== "", "the same answer twice");
  check(dbl[0].key === dbl[1].key && dbl[0].key !== "", "one key for the double click");
  check(dbl.filter((r) => r.replay).length === 1, `exactly one replay: ${JSON.stringify(dbl)}`);
  out.doubleClick = { key: dbl[0].key, answer: dbl[0].answer, replays: dbl.map((r) => r.replay) };

  // 2. Reload while the call runs.
  const page2 = await context.newPage();
  page2.on("pageerror", (e) => consoleErrors.push(String(e)));
  await page2.goto(`${api}/`, wait);
  await page2.fill("#prompt", `Reload ${tag}`);
  await page2.click("#generate");
  const keyBefore = await page2.getAttribute('#status[data-state="running"]', "data-key", wait);
  check(keyBefore, "the page shows the running call's key");
  await page2.reload(wait);
  await page2.waitForSelector("#results .result", wait);
  const after = await results(page2);
  check(after.length === 1 && !after[0].error, `one answer after the reload: ${JSON.stringify(after)}`);
  check(after[0].key === keyBefore, `the same key after the reload: ${keyBefore} then ${after[0].key}`);
  check(after[0].resumed, "the page says it resumed the action");
  check(await page2.inputValue("#prompt") === `Reload ${tag}`, "the prompt is restored");
  out.reload = { keyBefore, keyAfter: after[0].key, answer: after[0].answer, replay: after[0].replay };
  await page2.screenshot({ path: join(args.out, "demo-after-reload.png"), fullPage: true });

  // 3. CORS from another loopback origin.
  await new Promise((resolve) => other.listen(0, "127.0.0.1", resolve));
  const origin = `http://127.0.0.1:${other.address().port}`;
  const page3 = await context.newPage();
  await page3.goto(`${origin}/`, wait);
  const cors = await page3.evaluate(async ({ api, key }) => {
    const call = async () => {
      const r = await fetch(`${api}/v1/ops/demo`, {
        method: "POST",
        headers: { Authorization: "Bearer dev-demo-key", "Content-Type": "application/json", "Idempotency-Key": key, Prefer: "wait=25" },
        body: JSON.stringify({ messages: [{ role: "user", content: "from another origin" }] }),
      });
      const body = await r.json();
      return {
        status: r.status, cached: body.cached,
        replayed: r.headers.get("Idempotent-Replayed"), keyRef: r.headers.get("Idempotency-Key-Ref"),
        location: r.headers.get("Location"), completedAt: r.headers.get("Idempotent-Completed-At"),
      };
    };
    return { first: await call(), second: await call() };
  }, { api, key: `cors-${Math.random().toString(36).slice(2, 10)}` });
  check(cors.first.status === 200 && cors.second.status === 200, `CORS calls answered 200: ${JSON.stringify(cors)}`);
  check(cors.first.keyRef && cors.first.location, `Idempotency-Key-Ref and Location are exposed: ${JSON.stringify(cors)}`);
  check(cors.second.replayed === "true" && cors.second.completedAt, `Idempotent-Replayed and -Completed-At are exposed: ${JSON.stringify(cors)}`);
  out.cors = { origin, ...cors };

  check(consoleErrors.length === 0, `no errors in the page: ${consoleErrors.join("; ")}`);
  await page.screenshot({ path: join(args.out, "demo.png"), fullPage: true });
  out.screenshot = join(args.out, "demo.png");
  out.ok = true;
} finally {
  other.close();
  await browser.close();
}
console.log(JSON.stringify(out));
