// What every *.browser.mjs driver shares: its command line, a headless
// Chromium that runs as root in a container without Google's services on
// a closed network, and the check that fails the run.
import { mkdir } from "node:fs/promises";
import { parseArgs } from "node:util";
import { chromium } from "playwright-core";

// How long a step of a driver may wait for the page.
export const wait = { timeout: 30_000 };

// cli reads --url and the driver's other options, all required (it prints
// usage and exits 2 when one is missing); api is the URL without a
// trailing slash.
export function cli(usage, ...names) {
  const options = Object.fromEntries(["url", ...names].map((n) => [n, { type: "string" }]));
  const { values: args } = parseArgs({ options });
  if (Object.keys(options).some((n) => !args[n])) {
    console.error(`usage: ${usage}`);
    process.exit(2);
  }
  return { args, api: args.url.replace(/\/+$/, "") };
}

export function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

// launch starts headless Chromium (CHROMIUM, default /usr/bin/chromium).
export function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"],
  });
}

// newest reads the demo page's newest result.
export function newest(page) {
  return page.$eval("#results .result", (li) => ({
    state: li.dataset.state ?? "", replay: li.dataset.replay ?? "", key: li.dataset.key ?? "",
    reconnects: Number(li.dataset.reconnects ?? "0"),
    answer: li.querySelector(".answer")?.textContent ?? "", error: li.classList.contains("error"),
    resumed: (li.querySelector(".meta")?.textContent ?? "").includes("resumed"),
  }));
}

// streamSome opens the demo page, asks it to stream a new prompt, and
// returns once some words have arrived while the stream still runs.
export async function streamSome(page, api) {
  await page.goto(`${api}/`, wait);
  await page.fill("#prompt", `Stream a haiku ${Math.random().toString(36).slice(2, 8)}`);
  await page.click("#stream");
  await page.waitForFunction(() => {
    const li = document.querySelector("#results .result");
    return li?.dataset.state === "streaming" && (li.querySelector(".answer")?.textContent ?? "").split(" ").length >= 3;
  }, null, wait);
}

// untilDone waits until the newest result has ended.
export function untilDone(page) {
  return page.waitForFunction(() => document.querySelector("#results .result")?.dataset.state === "done", null, wait);
}

// jobDriver runs a driver of the demo page's long jobs: it reads --url and
// --out (making the out directory), opens the demo page in headless
// Chromium, starts a job with a new prompt and waits for the page to show
// its key; then runs steps({ args, context, page, key, prompt,
// acceptedAfterMs, errors, out }), checks that no page threw (steps adds
// its other pages' errors to errors), and prints out, with the key and
// ok, as one JSON line.
export async function jobDriver(usage, steps) {
  const { args, api } = cli(usage, "out");
  await mkdir(args.out, { recursive: true });
  const prompt = `Research ${Math.random().toString(36).slice(2, 8)}`;
  const browser = await launch();
  const out = {};
  try {
    const context = await browser.newContext({ viewport: { width: 900, height: 1000 } });
    const page = await context.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await page.goto(`${api}/`, wait);
    await page.fill("#job-prompt", prompt);
    const clicked = Date.now();
    await page.click("#job-start");
    const key = await page.getAttribute('#job-status[data-state="running"]', "data-key", wait);
    const acceptedAfterMs = Date.now() - clicked;
    check(key, "the page shows the job's key");
    await steps({ args, context, page, key, prompt, acceptedAfterMs, errors, out });
    check(errors.length === 0, `no errors in the page: ${errors.join("; ")}`);
    out.key = key;
    out.ok = true;
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
}
