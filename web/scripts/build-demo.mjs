// Builds the demo page into a directory (default ../internal/webui/dist,
// which is committed and embedded into the binary): index.html and
// assets/demo.js, a minified bundle of demo/demo.ts with the client.
// Usage: node scripts/build-demo.mjs [outdir]
import { build } from "esbuild";
import { copyFile, mkdir, rm } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const web = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const defaultOut = resolve(web, "../internal/webui/dist");

export async function buildDemo(out = defaultOut) {
  await rm(out, { recursive: true, force: true });
  await mkdir(join(out, "assets"), { recursive: true });
  await build({
    entryPoints: [join(web, "demo/demo.ts")],
    outfile: join(out, "assets/demo.js"),
    bundle: true,
    format: "esm",
    target: "es2022",
    minify: true,
    legalComments: "none",
    charset: "utf8",
    logLevel: "warning",
  });
  await copyFile(join(web, "demo/index.html"), join(out, "index.html"));
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await buildDemo(process.argv[2] ? resolve(process.argv[2]) : defaultOut);
}
