// Drives the long-job part of the demo page of a running `idemguard serve`
// (development mode) in headless Chromium with playwright-core, and prints
// what the page showed as one JSON line; integration/browser_test.go
// starts the built binary, runs this script and checks the server's side.
//
// Usage: node browser/jobs.browser.mjs --url http://127.0.0.1:8080 --out DIR
// Env: CHROMIUM (default /usr/bin/chromium).
//
// 1. Submit: Start job answers at once; the page follows the job's events.
// 2. Reload while the job runs: the page reattaches to the same key and
//    keeps following it (a heartbeat arrives after the reload).
// 3. Cancel: the job ends canceled within a few seconds.
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { check, cli, launch, wait } from "./harness.mjs";

const { args, api } = cli("node browser/jobs.browser.mjs --url http://127.0.0.1:8080 --out DIR", "out");
await mkdir(args.out, { recursive: true });
const tag = Math.random().toString(36).slice(2, 8);

const kinds = (page) => page.$$eval("#job-events li", (items) => items.map((li) => li.dataset.kind));

const browser = await launch();
const out = {};
try {
  const context = await browser.newContext({ viewport: { width: 900, height: 1000 } });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));

  // 1. Submit.
  await page.goto(`${api}/`, wait);
  await page.fill("#job-prompt", `Research ${tag}`);
  const clicked = Date.now();
  await page.click("#job-start");
  const key = await page.getAttribute('#job-status[data-state="running"]', "data-key", wait);
  out.acceptedAfterMs = Date.now() - clicked;
  check(key, "the page shows the job's key");
  check(out.acceptedAfterMs < 10_000, `the submission answered at once, not after the job: ${out.acceptedAfterMs} ms`);
  await page.waitForSelector('#job-events li[data-kind="started"]', wait);

  // 2. Reload while it runs: reattach.
  await page.reload(wait);
  const again = await page.getAttribute('#job-status[data-state="running"][data-reattached="true"]', "data-key", wait);
  check(again === key, `the same job after the reload: ${key} then ${again}`);
  check(await page.inputValue("#job-prompt") === `Research ${tag}`, "the prompt is restored");
  await page.waitForSelector('#job-events li[data-kind="alive"]', wait);
  out.afterReload = await kinds(page);
  check(out.afterReload[0] === "started", `the reattached stream starts with the job's start: ${out.afterReload}`);
  await page.screenshot({ path: join(args.out, "job-reattached.png"), fullPage: true });

  // 3. Cancel.
  const canceling = Date.now();
  await page.click("#job-cancel");
  await page.waitForSelector('#job-status[data-state="canceled"]', wait);
  out.canceledAfterMs = Date.now() - canceling;
  out.events = await kinds(page);
  check(out.events.at(-1) === "canceled", `the stream ends canceled: ${out.events}`);
  check(await page.isDisabled("#job-cancel"), "nothing left to cancel");
  await page.screenshot({ path: join(args.out, "job-canceled.png"), fullPage: true });

  check(errors.length === 0, `no errors in the page: ${errors.join("; ")}`);
  out.key = key;
  out.ok = true;
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
