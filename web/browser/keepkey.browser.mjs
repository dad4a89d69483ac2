// Drives the demo page of a running `idemguard serve` (development mode) in
// headless Chromium through the worst sequence for a key: the first request
// runs the operation but its answer is lost (a network error), the retry is
// refused with 401 (an expired credential), and the user clicks again. The
// client must send one key all three times, so the server runs the operation
// once and the last click gets its replay. Prints what it saw as one JSON
// line; integration/browser_test.go checks the server's side.
//
// Usage: node browser/keepkey.browser.mjs --url http://127.0.0.1:8080
// Env: CHROMIUM (default /usr/bin/chromium).
import { check, cli, launch, wait } from "./harness.mjs";

const { api } = cli("node browser/keepkey.browser.mjs --url http://127.0.0.1:8080");

const browser = await launch();
const out = { requests: [] };
try {
  const page = await browser.newPage();
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  await page.route(`${api}/v1/ops/demo`, async (route) => {
    const req = route.request();
    const n = out.requests.push({ key: req.headers()["idempotency-key"] ?? null });
    if (n === 1) {
      // The request reaches the server and runs; its answer never arrives.
      const resp = await route.fetch();
      out.requests[0].lostStatus = resp.status();
      await route.abort("failed");
    } else if (n === 2) {
      // The credential expired meanwhile: the server refuses the retry.
      await route.continue({ headers: { ...req.headers(), authorization: "Bearer expired-credential" } });
    } else {
      await route.continue();
    }
  });

  await page.goto(`${api}/`, wait);
  await page.fill("#prompt", `Keep the key ${Math.random().toString(36).slice(2, 8)}`);
  await page.click("#generate");
  await page.waitForSelector("#results .result.error", wait);
  const first = await page.$eval("#results .result", (li) => ({
    badge: li.querySelector(".badge")?.textContent ?? "",
    key: li.querySelector(".key")?.textContent ?? "",
  }));
  check(first.badge === "error 401", `the first click ends in a 401: ${JSON.stringify(first)}`);
  await page.waitForSelector('#status[data-state="idle"]', { ...wait, state: "attached" });

  // The user clicks again: the same action, so the same key, and the answer
  // of the execution whose answer was lost.
  await page.click("#generate");
  await page.waitForFunction(() => document.querySelectorAll("#results .result").length >= 2, null, wait);
  const second = await page.$eval("#results .result", (li) => ({
    error: li.classList.contains("error"),
    replay: li.dataset.replay === "true",
    key: li.querySelector(".key")?.textContent ?? "",
    answer: li.querySelector(".answer")?.textContent ?? "",
  }));
  check(!second.error && second.replay, `the second click gets the replay: ${JSON.stringify(second)}`);
  check(out.requests.length === 3, `three requests: ${JSON.stringify(out.requests)}`);
  check(out.requests.every((r) => r.key === first.key && r.key), `one key for all three: ${JSON.stringify(out.requests)}`);
  check(pageErrors.length === 0, `no errors in the page: ${pageErrors.join("; ")}`);
  Object.assign(out, { key: first.key, firstBadge: first.badge, replay: second.replay, answer: second.answer, ok: true });
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
