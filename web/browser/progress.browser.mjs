// Drives the demo page's job progress of a running `idemguard serve`
// (development mode, the 30-second demo-job scope, which reports 10 steps)
// in headless Chromium with playwright-core, and prints what the page
// showed as one JSON line; integration/browser_test.go starts the built
// binary, runs this script and checks the server's side.
//
// Usage: node browser/progress.browser.mjs --url http://127.0.0.1:8080 --out DIR
// Env: CHROMIUM (default /usr/bin/chromium).
//
// 1. Tab A starts the job; tab B, opened from it (its session storage, and
//    so the job, copied), follows the job it did not start.
// 2. Tab B's progress bar advances.
// 3. A reload of tab B shows the progress at once, and the job's end: the
//    bar full, the last stage.
// 4. Another reload after the end still shows the final state.
import { join } from "node:path";
import { check, jobDriver, wait } from "./harness.mjs";

const long = { timeout: 60_000 };

const done = (page) => page.$eval("#job-progress", (p) => Number(p.dataset.done ?? 0));
const moreThan = (page, n) => page.waitForFunction((n) => {
  const p = document.querySelector("#job-progress");
  return p !== null && !document.querySelector("#job-progress-row").hidden && Number(p.dataset.done ?? 0) > n;
}, n, long);

await jobDriver("node browser/progress.browser.mjs --url http://127.0.0.1:8080 --out DIR", async ({ args, context, page: a, key, errors, out }) => {
  // 1. Tab A (jobDriver's page) started the job; tab B follows it.
  const [b] = await Promise.all([context.waitForEvent("page", wait), a.evaluate(() => { window.open(location.href); })]);
  b.on("pageerror", (e) => errors.push(String(e)));
  const followed = await b.getAttribute('#job-status[data-state="running"]', "data-key", wait);
  check(followed === key, `tab B follows tab A's job: ${key}, ${followed}`);

  // 2. The bar advances in tab B.
  await moreThan(b, 0);
  const first = await done(b);
  await moreThan(b, first);
  const second = await done(b);
  out.advanced = [first, second];
  check(second > first, `the bar advances: ${out.advanced}`);
  await b.screenshot({ path: join(args.out, "job-progress.png"), fullPage: true });

  // 3. A reload shows the progress at once, then the end.
  await b.reload(wait);
  await b.waitForSelector('#job-status[data-state="running"][data-reattached="true"]', wait);
  await moreThan(b, 0);
  out.afterReload = await done(b);
  check(out.afterReload >= second, `the progress survives the reload: ${out.afterReload} after ${second}`);
  await b.waitForSelector('#job-status[data-state="succeeded"]', long);
  out.final = { done: await done(b), value: await b.$eval("#job-progress", (p) => p.value), stage: await b.textContent("#job-stage") };
  check(out.final.done === 10 && out.final.value === 1, `the bar is full at the end: ${JSON.stringify(out.final)}`);

  // 4. A reload after the end shows the final state.
  await b.reload(wait);
  await b.waitForSelector('#job-status[data-state="succeeded"]', wait);
  out.finalAfterReload = { done: await done(b), stage: await b.textContent("#job-stage") };
  check(out.finalAfterReload.done === 10, `the final state after a reload: ${JSON.stringify(out.finalAfterReload)}`);
  await b.screenshot({ path: join(args.out, "job-progress-final.png"), fullPage: true });
});
