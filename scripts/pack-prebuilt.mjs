// npm's prepack step: puts this machine's build of the core, without its debug sections, into
// native/prebuilt/<platform>-<arch>/, which the package ships so that installing it needs no
// compiler (scripts/install.mjs checks it on the installing machine, src/core/native.ts finds it).
import { spawnSync } from "node:child_process";
import { chmodSync, copyFileSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const platform = `${process.platform}-${process.arch}`;
if (platform !== "linux-x64") {
  console.error(`pack-prebuilt: the core builds for linux-x64 only, not ${platform}`);
  process.exit(1);
}

const make = spawnSync(process.execPath, [join(root, "scripts", "build-native.mjs")], {
  stdio: "inherit",
});
if (make.status !== 0) process.exit(make.status ?? 1);

const out = join(root, "native", "prebuilt", platform);
const tmp = `${out}.tmp`;
rmSync(tmp, { recursive: true, force: true });
mkdirSync(tmp, { recursive: true });
for (const name of ["libcvisor.so", "cvisor-helper", "libcvisor-shim.so"]) {
  const to = join(tmp, name);
  copyFileSync(join(root, "native", "build", name), to);
  // Debug sections are most of each file (1 MB of the library's 1.1); symbols stay.
  const strip = spawnSync("objcopy", ["--strip-debug", to], { stdio: "inherit" });
  if (strip.error) console.warn(`pack-prebuilt: objcopy did not run (${strip.error.message})`);
  else if (strip.status !== 0) process.exit(strip.status ?? 1);
  chmodSync(to, 0o755);
}
// The old core moves aside only when the new one is complete: a pack interrupted anywhere
// leaves a whole core on disk, never a half-copied one (and prepack makes it again before any
// pack).
const old = `${out}.old`;
rmSync(old, { recursive: true, force: true });
try {
  renameSync(out, old);
} catch {
  // none yet
}
renameSync(tmp, out);
rmSync(old, { recursive: true, force: true });
console.log(`pack-prebuilt: ${out}`);
