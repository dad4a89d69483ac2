// Fails when a committed generated file is stale:
//   src/openapi.gen.ts            vs openapi-typescript over ../docs/openapi.yaml
//   ../internal/webui/dist/**     vs a fresh build of the demo page
// Fix with: npm run gen:types && npm run build:demo
import { execFileSync } from "node:child_process";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { buildDemo, defaultOut } from "./build-demo.mjs";

const web = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const tmp = await mkdtemp(join(tmpdir(), "idemguard-web-"));
const stale = [];
try {
  const types = join(tmp, "openapi.gen.ts");
  execFileSync(process.execPath, [join(web, "node_modules/openapi-typescript/bin/cli.js"), join(web, "../docs/openapi.yaml"), "-o", types], { stdio: "pipe" });
  if (!(await same(types, join(web, "src/openapi.gen.ts")))) stale.push("src/openapi.gen.ts (run: npm run gen:types)");

  const out = join(tmp, "dist");
  await buildDemo(out);
  const want = await files(out);
  const have = await files(defaultOut).catch(() => []);
  for (const f of new Set([...want, ...have])) {
    if (!want.includes(f) || !have.includes(f) || !(await same(join(out, f), join(defaultOut, f)))) {
      stale.push(`${relative(web, join(defaultOut, f))} (run: npm run build:demo)`);
    }
  }
} finally {
  await rm(tmp, { recursive: true, force: true });
}
if (stale.length > 0) {
  console.error(`check-fresh: FAIL: stale generated files:\n  ${stale.join("\n  ")}`);
  process.exit(1);
}
console.log("check-fresh: ok: openapi types and the demo bundle match their sources");

async function same(a, b) {
  const [x, y] = await Promise.all([readFile(a), readFile(b).catch(() => null)]);
  return y !== null && x.equals(y);
}

async function files(dir) {
  const out = [];
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) out.push(relative(dir, join(e.parentPath, e.name)));
  }
  return out.sort();
}
