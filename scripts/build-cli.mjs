// Builds the `cvisor` bin: dist/cvisor.cjs, one CommonJS file bundled by esbuild from
// src/cli/main.ts (an ESM entry and a module graph cost milliseconds at every start).
// What main.ts loads lazily (doctor, the commander parser, and the library entry that
// tells their modules where the package is) stays out of the bundle: those dynamic
// imports are pointed at tsc's ESM output in dist/src/, so the bundle holds only the
// run path and V8 does not pre-parse the rest at every start.
import { build } from "esbuild";
import { chmodSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const lazy = {
  "./doctor.js": "./src/cli/doctor.js",
  "./commands.js": "./src/cli/commands.js",
  "./parse.js": "./src/cli/parse.js",
  "../index.js": "./src/index.js",
};

const outfile = join(root, "dist", "cvisor.cjs");
await build({
  entryPoints: [join(root, "src", "cli", "main.ts")],
  outfile,
  bundle: true,
  platform: "node",
  target: "node20",
  format: "cjs",
  packages: "external",
  sourcemap: true,
  logLevel: "warning",
  plugins: [
    {
      name: "lazy-esm",
      setup(b) {
        b.onResolve({ filter: /^\.{1,2}\/[\w-]+\.js$/ }, (args) => {
          const to = lazy[args.path];
          const fromMain = args.importer === join(root, "src", "cli", "main.ts");
          return to && fromMain && args.kind === "dynamic-import"
            ? { path: to, external: true }
            : undefined;
        });
      },
    },
  ],
});
chmodSync(outfile, 0o755);
