// The `cvisor` executable (dist/cvisor.cjs): runs the CLI bundle (dist/cli.cjs, esbuild's
// bundle of main.ts) with V8's code cache for it (dist/cli.cjs.cache). The build writes the
// cache after one `cvisor -- true` (scripts/build-cli.mjs), so the functions of the run path
// arrive compiled: about a millisecond less at every start (measured; what the CLI adds to
// Node's own start is ~4 ms). Node 22 has module.enableCompileCache for this, Node 20 has not.
// The cache is used only with the bundle it was made from: its first line is the bundle's first
// line, the build id (a hash of the bundle). V8 refuses one made by another V8 or with other
// flags; without a cache the bundle is compiled as usual. The cache is base64 text: Node reads a
// file into a string on a fast path, while its first read into a Buffer costs ~0.2 ms.
import fs = require("node:fs");
import path = require("node:path");
import vm = require("node:vm");

type Entry = (
  exports: unknown,
  require: NodeJS.Require,
  module: NodeJS.Module,
  filename: string,
  dirname: string,
  importLazy: (specifier: string) => Promise<unknown>,
) => void;

const bundle = path.join(__dirname, "cli.cjs");
const cacheFile = `${bundle}.cache`;
const source = fs.readFileSync(bundle, "utf8");
const id = source.slice(0, source.indexOf("\n") + 1);

/** The cache's V8 data if it was made from this bundle, else undefined. */
function readCache(): Buffer | undefined {
  let text: string;
  try {
    text = fs.readFileSync(cacheFile, "utf8");
  } catch {
    return undefined; // none (a build that could not run a sandbox): compile as usual
  }
  return text.startsWith(id) ? Buffer.from(text.slice(id.length), "base64") : undefined;
}

/** The build's step: the cache of what this process compiled, written when it exits. */
function writeCacheAtExit(script: vm.Script, out: string): void {
  process.once("exit", () => {
    const tmp = `${out}.${process.pid}.tmp`;
    fs.writeFileSync(tmp, `${id}${script.createCachedData().toString("base64")}\n`);
    fs.renameSync(tmp, out);
  });
}

// The bundle's lazy imports of tsc's ESM output (doctor, the full parser, the store commands)
// come here: a dynamic import() inside a vm.Script needs an experimental flag on Node 20.
function importLazy(specifier: string): Promise<unknown> {
  const { pathToFileURL } = require("node:url") as typeof import("node:url");
  return import(pathToFileURL(path.join(__dirname, specifier)).href);
}

// The same wrapper as Node's CommonJS loader, plus the lazy importer.
const script = new vm.Script(
  `(function (exports, require, module, __filename, __dirname, __cvisorImportLazy) {${source}\n})`,
  { filename: bundle, cachedData: readCache() },
);
const out = process.env.CVISOR_CODE_CACHE_OUT;
if (out) writeCacheAtExit(script, out);
(script.runInThisContext() as Entry)(exports, require, module, bundle, __dirname, importLazy);
