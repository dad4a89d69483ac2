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
import { join } from "node:path";
import { check, jobDriver, wait } from "./harness.mjs";

const kinds = (page) => page.$$eval("#job-events li", (items) => items.map((li) => li.dataset.kind));

await jobDriver("node browser/jobs.browser.mjs --url http://127.0.0.1:8080 --out DIR", async ({ args, page, key, prompt, acceptedAfterMs, out }) => {
  // 1. Submit (jobDriver started the job).
  out.acceptedAfterMs = acceptedAfterMs;
  check(out.acceptedAfterMs < 10_000, `the submission answered at once, not after the job: ${out.acceptedAfterMs} ms`);
  await page.waitForSelector('#job-events li[data-kind="started"]', wait);

  // 2. Reload while it runs: reattach.
  await page.reload(wait);
  const again = await page.getAttribute('#job-status[data-state="running"][data-reattached="true"]', "data-key", wait);
  check(again === key, `the same job after the reload: ${key} then ${again}`);
  check(await page.inputValue("#job-prompt") === prompt, "the prompt is restored");
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
});
