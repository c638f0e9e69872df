// npm's install step, in a checkout and in an installed package alike: makes sure this machine
// has a core that works. The package ships one prebuilt for linux-x64 (native/prebuilt/, made
// by scripts/pack-prebuilt.mjs at `npm pack`); when it loads and runs here nothing is built, so
// installing needs no compiler. Otherwise (another libc, a checkout, CVISOR_BUILD_FROM_SOURCE
// set) the core is built from the C sources the package also ships, and a machine without a
// compiler gets one line that says what to install.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const platform = `${process.platform}-${process.arch}`;

if (platform !== "linux-x64") {
  // package.json's os/cpu stop npm before this; `npm install --force` does not.
  console.error(`cvisor: the sandbox core runs on Linux x86-64 only; this machine is ${platform}`);
  process.exit(1);
}

/** Why the core in `dir` cannot serve this machine, or "" when it can. */
function unusable(dir) {
  const lib = join(dir, "libcvisor.so");
  const helper = join(dir, "cvisor-helper");
  if (!existsSync(lib) || !existsSync(helper)) return `${dir} has no core`;
  const header = readFileSync(join(root, "native", "include", "cvisor.h"), "utf8");
  const wanted = Number(/#define CV_ABI_VERSION (\d+)/.exec(header)?.[1]);
  // The library is loaded the way the runtime loads it (koffi, into this Node), so a libc it
  // cannot link against shows here rather than at the first run.
  let version;
  try {
    const koffi = createRequire(join(root, "package.json"))("koffi");
    version = koffi.load(lib).func("int cv_abi_version(void)")();
  } catch (err) {
    return `cannot load ${lib}: ${String(err?.message ?? err).split("\n")[0]}`;
  }
  if (version !== wanted) return `${lib} has ABI ${version}, the sources ${wanted}`;
  // The helper is the sandbox's init: with no arguments it says what it is and exits 2.
  const run = spawnSync(helper, [], { encoding: "utf8", stdio: ["ignore", "ignore", "pipe"] });
  if (run.status !== 2 || !run.stderr.includes("cvisor-helper")) {
    return `${helper} does not run here (${run.error?.message ?? `exit ${run.status}`})`;
  }
  return "";
}

const prebuilt = join(root, "native", "prebuilt", platform);
const fromSource = Boolean(process.env.CVISOR_BUILD_FROM_SOURCE);
if (!fromSource && existsSync(prebuilt)) {
  const why = unusable(prebuilt);
  if (!why) process.exit(0);
  console.error(`cvisor: the prebuilt core does not fit this machine (${why}): building it`);
}
const build = spawnSync(process.execPath, [join(root, "scripts", "build-native.mjs")], {
  stdio: "inherit",
});
process.exit(build.status ?? 1);
