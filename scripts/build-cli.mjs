// Builds the `cvisor` bin. dist/cli.cjs is one CommonJS file bundled by esbuild from
// src/cli/main.ts (an ESM entry and a module graph cost milliseconds at every start);
// dist/cvisor.cjs, the bin, is src/cli/bin.cts: it runs that bundle with V8's code cache,
// dist/cli.cjs.cache, which this script writes last by running `cvisor -- true` once.
// What main.ts loads lazily (the commander parser, every command but the run, and the library
// entry that tells their modules where the package is) stays out of the bundle: those dynamic
// imports are pointed at tsc's ESM output in dist/src/ and go through the bin's importer (a
// dynamic import() in a vm.Script needs an experimental flag on Node 20).
import { build } from "esbuild";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
const lazy = {
  "./commands/all.js": "./src/cli/commands/all.js",
  "./parse.js": "./src/cli/parse.js",
  // A shell asking for completion candidates (cvisor __complete ...).
  "./completion.js": "./src/cli/completion.js",
  "../index.js": "./src/index.js",
  // The interactive run (a pty relayed on the event loop: node:tty, node:net, the library's
  // streams), imported by the run command only when the guest gets a terminal of its own.
  "../terminal-run.js": "./src/cli/terminal-run.js",
};
/** Who may import each lazy module lazily (main.ts, unless said here). */
const lazyImporter = { "../terminal-run.js": join(root, "src", "cli", "commands", "run.ts") };

// What the CLI uses of node:os (checked against the bundle below): only these are forwarded.
const OS_KEYS = ["availableParallelism", "constants", "homedir"];

/** A CommonJS module whose exports `keys` load `name` when first read. */
function lazyModule(name, keys) {
  const getters = keys.map(
    (key) =>
      `  ${JSON.stringify(key)}: { get: () => load()[${JSON.stringify(key)}], enumerable: true },`,
  );
  return [
    "let mod;",
    `const load = () => (mod ??= require(${JSON.stringify(name)}));`,
    "Object.defineProperties(module.exports, {",
    ...getters,
    "});",
  ].join("\n");
}

const result = await build({
  entryPoints: [join(root, "src", "cli", "main.ts")],
  outfile: join(dist, "cli.cjs"),
  bundle: true,
  platform: "node",
  target: "node20",
  format: "cjs",
  packages: "external",
  sourcemap: true,
  write: false,
  logLevel: "warning",
  plugins: [
    {
      // node:os costs ~0.1 ms to load, and a plain run needs nothing of it (errno and signal
      // names, the home directory when $HOME is unset): in the bundle it loads on first use.
      name: "lazy-node-os",
      setup(b) {
        b.onResolve({ filter: /^(node:)?os$/ }, (args) =>
          args.namespace === "lazy-os"
            ? { path: "node:os", external: true }
            : { path: "node:os", namespace: "lazy-os" },
        );
        b.onLoad({ filter: /.*/, namespace: "lazy-os" }, () => ({
          contents: lazyModule("node:os", OS_KEYS),
          loader: "js",
        }));
      },
    },
    {
      name: "lazy-esm",
      setup(b) {
        b.onResolve({ filter: /^\.{1,2}\/[\w/-]+\.js$/ }, (args) => {
          const to = lazy[args.path];
          const importer = lazyImporter[args.path] ?? join(root, "src", "cli", "main.ts");
          return to && args.importer === importer && args.kind === "dynamic-import"
            ? { path: to, external: true }
            : undefined;
        });
      },
    },
  ],
});

const code = result.outputFiles.find((f) => f.path.endsWith(".cjs"));
const map = result.outputFiles.find((f) => f.path.endsWith(".map"));
if (!code || !map) throw new Error("build-cli: esbuild wrote no bundle");
let text = code.text;
const imports = /\bimport\((["'])(\.\/src\/[\w/-]+\.js)\1\)/g;
const count = [...text.matchAll(imports)].length;
const expected = new Set(Object.values(lazy)).size;
if (count < expected) {
  throw new Error(`build-cli: found ${count} lazy imports in the bundle, expected ${expected}`);
}
text = text.replace(imports, "__cvisorImportLazy($1$2$1)");
if (/\bimport\(/.test(text)) throw new Error("build-cli: the bundle has a dynamic import left");
for (const [, key] of text.matchAll(/\bimport_node_os\d*\.(\w+)/g)) {
  if (!OS_KEYS.includes(key))
    throw new Error(`build-cli: the CLI uses os.${key}: add it to OS_KEYS`);
}
// The first line is the build id, which heads the code cache made from this very bundle; the
// source map gets one empty line in front to match.
const id = createHash("sha256").update(text).digest("hex").slice(0, 32);
writeFileSync(join(dist, "cli.cjs"), `// cvisor build ${id}\n${text}`);
const sourceMap = JSON.parse(map.text);
sourceMap.mappings = `;${sourceMap.mappings}`;
writeFileSync(join(dist, "cli.cjs.map"), JSON.stringify(sourceMap));

const bin = join(dist, "cvisor.cjs");
await build({
  entryPoints: [join(root, "src", "cli", "bin.cts")],
  outfile: bin,
  bundle: true,
  platform: "node",
  target: "node20",
  format: "cjs",
  banner: { js: "#!/usr/bin/env node" },
  logLevel: "warning",
});
chmodSync(bin, 0o755);

// The code cache: V8 keeps what one plain run compiled. A machine that cannot run sandboxes
// (yet) still gets the part of the path it ran; no cache at all only costs start-up time.
const cache = join(dist, "cli.cjs.cache");
rmSync(cache, { force: true });
const run = spawnSync(process.execPath, [bin, "--", "true"], {
  env: { ...process.env, CVISOR_CODE_CACHE_OUT: cache },
  stdio: ["ignore", "ignore", "pipe"],
  encoding: "utf8",
});
if (run.status !== 0) {
  const why = (run.stderr || run.error?.message || `exit ${run.status}`).trim().split("\n")[0];
  console.warn(`build-cli: the code cache covers only part of the run path (${why})`);
}
