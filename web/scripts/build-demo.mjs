// Builds the demo page's script into a directory (default
// ../internal/webui/dist, which is committed and embedded into the binary):
// assets/demo.js, a minified bundle of demo/demo.ts with the client. The
// page itself, demo/index.html, is embedded as it stands (demo.go).
// Usage: node scripts/build-demo.mjs [outdir]
import { build } from "esbuild";
import { mkdir, rm } from "node:fs/promises";
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
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await buildDemo(process.argv[2] ? resolve(process.argv[2]) : defaultOut);
}
