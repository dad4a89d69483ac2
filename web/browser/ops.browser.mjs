// Opens the operator page (/ops) of a running `idemguard serve` in headless Chromium with
// playwright-core (the operator listener's page: no credential), names a tenant whose keys to
// chart, waits for the charts, saves a screenshot and prints
// what the page drew as one JSON line; cmd/idemguard's ops browser test seeds the database, runs
// this script and checks the figures against what it seeded.
//
// Usage: node browser/ops.browser.mjs --url http://127.0.0.1:9090 --tenant TENANT --out DIR
// Env: CHROMIUM (default /usr/bin/chromium).
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { cli, launch } from "./harness.mjs";

const { args, api } = cli("node browser/ops.browser.mjs --url http://127.0.0.1:9090 --tenant TENANT --out DIR", "tenant", "out");
await mkdir(args.out, { recursive: true });

const browser = await launch();
const out = { errors: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1200, height: 900 } });
  page.on("pageerror", (err) => out.errors.push(String(err)));
  page.on("console", (msg) => { if (msg.type() === "error") out.errors.push(msg.text()); });
  await page.goto(api + "/ops");
  await page.fill("#tenant", args.tenant);
  await page.click("button[type=submit]");
  await page.waitForSelector("body[data-loaded=true]", { timeout: 30_000 });
  // Every drawn point, per chart and series: the Go test checks they carry the seeded figures.
  out.charts = await page.$$eval("svg.chart", (svgs) =>
    svgs.map((svg) => ({
      chart: svg.parentElement.id,
      points: [...svg.querySelectorAll("circle.pt")].map((c) => ({
        series: c.dataset.series, value: Number(c.dataset.value),
      })),
    })),
  );
  out.who = await page.textContent("#who");
  out.totals = await page.textContent("#totals");
  out.storedKey = await page.evaluate(() => sessionStorage.length + localStorage.length > 0);
  out.screenshot = join(args.out, "ops.png");
  await page.screenshot({ path: out.screenshot, fullPage: true });
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
